"""Kubernetes I/O: client factory, reflector (list+watch cache), status apply, events, lease elector."""
