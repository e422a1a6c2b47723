"""The base specs tests build on, written once.

A test adds the lines it is about: ``MINIMAL + "nnodes: 2\\n"``. Fields of its own come
after, and a later key of a YAML mapping is an error, so a test never silently overrides one.
"""

from __future__ import annotations

from typing import Final

#: The smallest valid spec: a name, an image, a command (one node, the default target).
MINIMAL: Final = "name: t\nimage: x:1\ncommand: [python, t.py]\n"
#: The same with an image in a registry and a pinned tag: the image lints stay quiet.
PINNED: Final = "name: t\nimage: ghcr.io/x/y:1.0\ncommand: [python, t.py]\n"
#: Two nodes: what a distributed job needs at least (rendezvous, the worker plan).
TWO_NODES: Final = MINIMAL + "nnodes: 2\n"
