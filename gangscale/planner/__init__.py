"""Pure planning functions: fit, pack, ``plan(snapshot, gangs, now) -> decisions``, explain.

No I/O, no clock, no client: the layering contract (``.importlinter``) enforces it.
"""
