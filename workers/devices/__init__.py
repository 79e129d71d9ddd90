"""Device discovery per vendor (AMD: workers/devices/amd.py) and pinning helpers."""
