"""Flyte 2: the settings of a ``flyte.TaskEnvironment`` with flyteplugins-pytorch's ``Elastic``."""
