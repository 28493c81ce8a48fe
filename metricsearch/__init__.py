"""Text similarity search for item-to-item recommendations, on learned text metrics."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("metricsearch")
except PackageNotFoundError:  # a source tree on sys.path that was never installed
    __version__ = "0+unknown"
