"""adaptalloc.torch's install() for the fake torch: "native" unless
FAKE_ADAPTALLOC_INSTALL names another answer."""
import os


def install():
    return os.environ.get("FAKE_ADAPTALLOC_INSTALL", "native")
