"""Services that do I/O: the producer clients, the scheduler node and its parts."""
