"""Processes: the forkservers, the worker processes that run jobs, and the backends that drive them."""
