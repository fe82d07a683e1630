"""Pure data: resources, pod demand, gangs, node pools, nodes, bookings, plans.

No I/O, no clock, no client: the layering contract (``.importlinter``) enforces it.
"""
