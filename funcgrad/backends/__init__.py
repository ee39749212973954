"""Execution backends: cpu (numpy, always present) and cuda (funcgrad.cuda, loaded lazily)."""
