"""Spans in memory: an OpenTelemetry SDK tracer provider of the test's own, installed as
wheelq's tracing for the roles the test makes afterwards (the global provider is left
alone, so tests do not share spans)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer

from wheelq.runtime import tracing


@dataclass
class Spans:
    """What a test reads its spans from, and a tracer of the same provider for its own."""

    exporter: InMemorySpanExporter
    tracer: Tracer

    def finished(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return [span for span in self.finished() if span.name == name]


@pytest.fixture
def traced(monkeypatch: pytest.MonkeyPatch) -> Iterator[Spans]:
    """wheelq traced into an in-memory exporter (for clients and workers made after it)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(tracing, "_loaded", tracing.Tracing(provider))
    yield Spans(exporter, provider.get_tracer("test"))
    provider.shutdown()
