"""An example codemoe plugin: the disk-check stage and the run timeline."""

from codemoe_example.stages import DiskCheck, DiskCheckConfig

__all__ = ["DiskCheck", "DiskCheckConfig"]
