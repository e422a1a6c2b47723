"""Reading a job back into elastic.yaml (``elastic-compile import``): what every target's reader shares.

A target's ``readback.py`` maps its manifest onto a :class:`.draft.Draft` (the spec being
written, with the manifest path of every value). What both directions of a Kubernetes
target have in common, in reverse, is here, one module per concern:

* :mod:`.draft`: the spec being written, its notes, and paths into the input stream;
* :mod:`.command_line`: the training container's command line, with its launcher
  unwrapped: ``torchrun``, ``python -m torch.distributed.run`` (or ``.launch``),
  ``elastic-launch`` with our options, and a plain ``sh -c`` script running one of them;
* :mod:`.launch_settings`: the launcher's settings onto the spec, against the topology the
  engine injects (the command line beats ``PET_*``, as in torchrun);
* :mod:`.pod_template`: a pod template onto ``image``, ``resources``, ``env``,
  ``shared_memory`` and ``pod_template``: the reverse of :func:`..pod.build_pod_template`;
* :mod:`.job_object`: the object around the pod: its schema, metadata, and what the
  devices imply.

Nothing is dropped silently: every value that is not carried, and every default that
now applies where the job had another behaviour, becomes a :class:`.draft.Note` located in
the manifest. Only values that differ from the spec's defaults are written.
"""
