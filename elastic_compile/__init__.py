"""elastic-compile: one validated elastic.yaml in, PyTorchJob / PodTemplate / Flyte specs out.

This module stays import-light on purpose: ``elastic-launch`` imports
``elastic_compile.contract`` inside training containers, so nothing here may pull in
jinja2, pydantic or torch.
"""

__version__ = "0.1.0"
