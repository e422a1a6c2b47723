"""Our device vocabulary (core/accelerators.py, data in the compile path) against flytekit's own module.

``flytekit.extras.accelerators`` is read here, the only place it is imported: every constant
that is an accelerator, the device name it serializes, and the partitions it defines (the
class attributes that are partitioned instances, ``A100.partition_1g_5gb``). Equal both ways,
so a flytekit upgrade that adds, renames or removes one fails here.
"""

from __future__ import annotations

from typing import Any

from elastic_compile.core.accelerators import DEVICES


def _flytekit_devices() -> dict[str, tuple[str, tuple[str, ...]]]:
    """constant -> (device name, partition sizes in definition order), from flytekit itself."""
    from flytekit.extras import accelerators
    from google.protobuf.json_format import MessageToDict

    out: dict[str, tuple[str, tuple[str, ...]]] = {}
    for name, value in vars(accelerators).items():
        if name.startswith("_") or not isinstance(value, accelerators.BaseAccelerator):
            continue
        device = MessageToDict(value.to_flyte_idl())["device"]
        partitions: list[str] = []
        if isinstance(value, accelerators.MultiInstanceGPUAccelerator):
            for attr, member in vars(type(value)).items():
                if isinstance(member, accelerators.MultiInstanceGPUAccelerator) and not attr.startswith("_"):
                    partitions.append(MessageToDict(member.to_flyte_idl())["partitionSize"])
        out[name] = (device, tuple(partitions))
    return out


def test_the_vocabulary_is_flytekits() -> None:
    theirs = _flytekit_devices()
    ours = {d.constant: (d.name, d.partitions) for d in DEVICES.values()}
    assert ours == theirs
    assert len(ours) == 18  # a bound: the module had 18 constants at flytekit 1.16.31


def test_tpus_are_flytekits_tpu_slices() -> None:
    """The devices we refuse as TPUs are the ones whose partitions flytekit calls slices."""
    from flytekit.extras import accelerators

    slices = {
        d.name
        for d in DEVICES.values()
        if any(attr.startswith("slice_") for attr in vars(type(getattr(accelerators, d.constant))))
    }
    assert (
        slices
        == {d.name for d in DEVICES.values() if d.tpu}
        == {
            "tpu-v5-lite-podslice",
            "tpu-v5p-slice",
            "tpu-v6e-slice",
        }
    )


def test_partitioned_is_how_flytekit_names_a_partition() -> None:
    """elastic_compile.flyte builds ``A100.partitioned("1g.5gb")``; it is flytekit's ``A100.partition_1g_5gb``."""
    from flytekit.extras.accelerators import A100, A100_80GB
    from google.protobuf.json_format import MessageToDict

    from elastic_compile.targets.flyte.kwargs import accelerator

    def idl(value: Any) -> dict[str, Any]:
        result: dict[str, Any] = MessageToDict(value.to_flyte_idl())
        return result

    assert idl(accelerator("nvidia-tesla-a100", "1g.5gb")) == idl(A100.partition_1g_5gb)
    assert idl(accelerator("nvidia-a100-80gb", "3g.40gb")) == idl(A100_80GB.partition_3g_40gb)
    assert idl(accelerator("nvidia-tesla-a100", None)) == idl(A100) == {"device": "nvidia-tesla-a100"}
