"""wheelq in a Django project: ``"wheelq.contrib.django"`` in INSTALLED_APPS and the
``WHEELQ`` setting naming the project's `wheelq.App` (`conf`); the app loaded at startup
(`apps`); ``manage.py wheelq run`` (docs/guides/tasks.md, "In Django").
"""
