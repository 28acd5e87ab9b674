"""wheelq: delayed jobs on Redis that fire on time."""
