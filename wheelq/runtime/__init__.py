"""What every role runs on: the supervised service base, riding out outages, the clocks."""
