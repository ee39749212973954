"""funcgrad.sharding: jax.sharding's Sharding and SingleDeviceSharding, for Array.sharding.

funcgrad's arrays live whole on one device (pmap's per-device values are separate arrays), so
every Array's sharding is a SingleDeviceSharding; meshes and NamedSharding are not provided.

Example:
    >>> import funcgrad.numpy as fnp
    >>> s = fnp.ones(3).sharding
    >>> s.is_fully_replicated, s.num_devices, s.shard_shape((3,))
    (True, 1, (3,))
"""
from __future__ import annotations

from funcgrad import core
from funcgrad.api.device_objects import Device

__all__ = ["Sharding", "SingleDeviceSharding"]


class Sharding:
    """How an array's data is laid out over devices (jax.sharding.Sharding)."""

    @property
    def device_set(self) -> set:
        """The devices holding part of the array."""
        raise NotImplementedError

    @property
    def addressable_devices(self) -> set:
        """The devices of device_set this process can reach (all of them here)."""
        return self.device_set

    @property
    def num_devices(self) -> int:
        """len(device_set)."""
        return len(self.device_set)


class SingleDeviceSharding(Sharding):
    """The whole array on one device (jax.sharding.SingleDeviceSharding).

    Args:
        device: a Device (or its platform name, "cpu" / "cuda").
        memory_kind: accepted for JAX's signature; funcgrad has one kind of memory per device.

    Example:
        >>> import funcgrad
        >>> from funcgrad.sharding import SingleDeviceSharding
        >>> SingleDeviceSharding(funcgrad.devices("cpu")[0])
        SingleDeviceSharding(device=cpu:0)
    """

    def __init__(self, device, *, memory_kind=None):
        self._device = device if isinstance(device, Device) else Device(str(device), 0)
        self.memory_kind = memory_kind

    device_set = property(lambda self: {self._device})
    is_fully_replicated = True
    is_fully_addressable = True

    def shard_shape(self, global_shape) -> tuple:
        """The shape of each device's part: the whole shape."""
        return tuple(global_shape)

    def devices_indices_map(self, global_shape) -> dict:
        """{device: index of its part}: the whole array."""
        return {self._device: tuple(slice(None) for _ in global_shape)}

    def __eq__(self, other):
        return (isinstance(other, SingleDeviceSharding) and self._device == other._device
                and self._device.id == other._device.id)

    def __hash__(self):
        return hash((SingleDeviceSharding, str(self._device), self._device.id))

    def __repr__(self):
        return f"SingleDeviceSharding(device={self._device}:{self._device.id})"


_SHARDINGS: dict = {}


def array_sharding(platform: str) -> SingleDeviceSharding:
    """The (cached) sharding of an Array on device `platform` ("cpu" or "cuda")."""
    s = _SHARDINGS.get(platform)
    if s is None:
        s = _SHARDINGS[platform] = SingleDeviceSharding(Device(platform, 0))
    return s


def _sharding(self) -> SingleDeviceSharding:
    """The array's layout over devices (jax.Array.sharding): its one device."""
    return array_sharding(self.device)


def _devices(self) -> set:
    """The set of Devices holding this array (jax.Array.devices): its one device."""
    if type(self.buf) is core.DeletedBuffer:
        self.buf.raise_error()
    return set(array_sharding(self.device).device_set)


core.Array.sharding = property(_sharding)
core.Array.devices = _devices
