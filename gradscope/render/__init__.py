"""Rendering: pure functions from monitor reports to rich renderables, JSON dicts, JUnit XML and
GitHub annotations. Never imports autograd, ops or nn, and never prints."""
