"""``elastic-compile run``: a compiled job on this machine, one process per pod, as its engine would run it.

One module per engine it emulates (:mod:`.kubeflow`: the training operator v1 and its
PyTorchJob), over what every engine shares: the kubelet's env and ``$(VAR)`` rules
(:mod:`.kubelet`), pods as processes (:mod:`.process`) and the job loop (:mod:`.job`).
The command line is :mod:`.cli`.
"""
