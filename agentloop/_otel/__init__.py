"""The OpenTelemetry listener behind ``agentloop.otel``: its spans, and the content they carry.

``spans.py`` is ``OtelListener``: a run's spans, made current while its
model calls and tools run; ``runs.py`` holds a followed run's open spans and
the scope each request is performed in; ``names.py`` the attributes' names;
``content.py`` turns messages into the GenAI conventions' shape, for the
user who opts in to capturing them.
"""
