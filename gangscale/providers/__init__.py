"""Node pool providers behind one small async interface: ``simulated`` and ``gke``."""
