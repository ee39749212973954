"""Device objects: one per GPU ("cuda") and N virtual CPU devices (config "num_cpu_devices")."""
from __future__ import annotations

from funcgrad.config import config


class Device(str):
    """A device, equal to its platform's name ("cpu" or "cuda") so that it works wherever
    funcgrad takes a device string (`device_put(x, d)`), plus JAX's `id` and `platform`.

    Example:
        >>> import funcgrad
        >>> d = funcgrad.devices("cpu")[0]
        >>> d == "cpu", d.id, d.platform
        (True, 0, 'cpu')
    """

    def __new__(cls, platform: str, id: int = 0):
        self = super().__new__(cls, platform)
        self.id = int(id)
        return self

    platform = property(lambda self: str(self))
    device_kind = property(lambda self: str(self))
    process_index = 0

    def __reduce__(self):
        return Device, (str(self), self.id)


def platform_devices(platform: str) -> list:
    """The devices of one platform: the GPUs numba-cuda sees (CUDA), or config.num_cpu_devices
    virtual CPU devices."""
    if platform == "cpu":
        return [Device("cpu", i) for i in range(config.num_cpu_devices)]
    if platform == "cuda":
        from funcgrad.cuda.devices import gpu_count
        return [Device("cuda", i) for i in range(gpu_count())]
    raise ValueError(f"unknown backend {platform!r}; funcgrad has 'cpu' and 'cuda'")
