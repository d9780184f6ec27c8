"""Library of the multi-host fault harness (tools/fault_cluster.py)."""
