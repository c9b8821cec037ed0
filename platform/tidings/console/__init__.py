"""The web console: ``tidings console MODULE:APP``, a small static page over a JSON API.

``server.py`` serves both with the standard library's ``ThreadingHTTPServer``; ``api.py``
answers the JSON API (docs/console.md), reading through ``tidings.inspection`` as the CLI's
``list``/``describe``/``journal`` do, and acting through ``actions.py`` (a signal, a cancel,
a schedule's pause or resume, a dead letter sent back) only when started with
``--allow-actions``. ``security.py`` decides who may ask what (Host, Origin, CSRF token,
bearer token), ``timeline.py`` and ``replay.py`` are the pure parts the page shows and the
replay's checks. ``static/`` is the page, shipped as package data: no Node build.
"""
