"""Fixtures for the Flyte tests: flytekit's serializer and spec files."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest
from flyte_helpers import FLYTE, spec_text


@pytest.fixture(scope="session")
def serialize() -> Any:
    """flytekit's own serializer: a task object -> MessageToDict(admin.TaskSpec), as pyflyte register does."""
    from flytekit.configuration import Image, ImageConfig, SerializationSettings
    from flytekit.tools.translator import get_serializable
    from google.protobuf.json_format import MessageToDict

    settings = SerializationSettings(
        project=FLYTE["project"],
        domain=FLYTE["domain"],
        version=FLYTE["version"],
        image_config=ImageConfig(default_image=Image(name="default", fqn="ghcr.io/example/trainer", tag="v1")),
    )

    def run(task: Any) -> dict[str, Any]:
        spec = get_serializable(OrderedDict(), settings, task)
        doc: dict[str, Any] = MessageToDict(spec.to_flyte_idl())
        return doc

    return run


@pytest.fixture
def write_spec(tmp_path: Path) -> Any:
    """Write an elastic.yaml built by ``spec_text`` and return its path."""

    def write(**fields: Any) -> Path:
        path = tmp_path / "elastic.yaml"
        path.write_text(spec_text(**fields))
        return path

    return write
