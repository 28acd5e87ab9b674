"""A tiny application for deploy/app-image: its tasks, in app/tasks.py."""
