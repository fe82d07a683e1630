"""The embedded simulated cluster: an in-memory Kubernetes API server and (later) emulators.

Product code never imports this package, except the CLI's ``demo`` and ``sim`` commands; the
layering contract enforces it.
"""
