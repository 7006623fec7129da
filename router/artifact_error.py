"""The one error a broken router artifact or encoder raises.

Its own module so that the encoder and the artifact loader share it without importing each other; the
gateway catches it at startup to refuse to start (or to run its configured fallback) with this message.
"""

from __future__ import annotations


class RouterArtifactError(RuntimeError):
    """A router artifact or encoder that is missing, corrupt or does not match; the message names the path."""
