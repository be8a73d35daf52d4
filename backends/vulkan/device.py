"""One Vulkan compute device through the `vulkan` (cffi) binding: buffers, kernels, submissions.

Pitfalls of the binding that shape this module (see the project's notes on GPU APIs):
- a nested struct keeps its pointees alive only while the Python object lives, so every struct
  with pointers, and every pNext chain, is held in a local until the call returns;
- VK_WHOLE_SIZE is -1 here and cannot be passed: ranges are given in bytes;
- a mapped view must not outlive its memory, so buffers unmap before they are freed.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import vulkan as vk

from llamay_backends.vulkan.shader_build import SPV_DIR

N_BINDINGS = 8  # every kernel uses one descriptor-set layout: 8 storage buffers
PUSH_WORDS = 16
ALL_MEMORY = vk.VK_ACCESS_SHADER_READ_BIT | vk.VK_ACCESS_SHADER_WRITE_BIT | vk.VK_ACCESS_TRANSFER_READ_BIT \
    | vk.VK_ACCESS_TRANSFER_WRITE_BIT | vk.VK_ACCESS_HOST_READ_BIT | vk.VK_ACCESS_HOST_WRITE_BIT
DEVICE_TYPES = {vk.VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: "discrete gpu",
                vk.VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: "integrated gpu",
                vk.VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: "virtual gpu",
                vk.VK_PHYSICAL_DEVICE_TYPE_CPU: "cpu", vk.VK_PHYSICAL_DEVICE_TYPE_OTHER: "other"}
TYPE_PREFERENCE = (vk.VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU, vk.VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU,
                   vk.VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU, vk.VK_PHYSICAL_DEVICE_TYPE_CPU,
                   vk.VK_PHYSICAL_DEVICE_TYPE_OTHER)


def version_text(v: int) -> str:
    return f"{v >> 22}.{(v >> 12) & 0x3FF}.{v & 0xFFF}"


class Buffer:
    """A storage buffer with its own memory; `view` is a uint8 numpy view when host-visible."""

    def __init__(self, device: "Device", size: int, host_visible: bool) -> None:
        self.device, self.size = device, max(int(size), 16)
        d = device.handle
        usage = (vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT
                 | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT)
        info = vk.VkBufferCreateInfo(size=self.size, usage=usage, sharingMode=vk.VK_SHARING_MODE_EXCLUSIVE)
        self.handle = vk.vkCreateBuffer(d, info, None)
        req = vk.vkGetBufferMemoryRequirements(d, self.handle)
        want = (vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT) if host_visible \
            else vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT
        index, flags = device.memory_type(req.memoryTypeBits, want)
        alloc = vk.VkMemoryAllocateInfo(allocationSize=req.size, memoryTypeIndex=index)
        self.memory = vk.vkAllocateMemory(d, alloc, None)
        vk.vkBindBufferMemory(d, self.handle, self.memory, 0)
        self.view: np.ndarray | None = None
        if flags & vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT and flags & vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT:
            mapped = vk.vkMapMemory(d, self.memory, 0, self.size, 0)
            self.view = np.frombuffer(mapped, np.uint8)

    def write(self, data: bytes | np.ndarray, offset: int = 0) -> None:
        raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8) if isinstance(data, np.ndarray) \
            else np.frombuffer(data, np.uint8)
        if self.view is not None:
            self.view[offset:offset + raw.size] = raw
        else:
            self.device.staged_write(self, raw, offset)

    def read(self, offset: int, size: int) -> bytes:
        if self.view is not None:
            return self.view[offset:offset + size].tobytes()
        return self.device.staged_read(self, offset, size)

    def release(self) -> None:
        if self.handle is None:
            return
        d = self.device.handle
        if self.view is not None:
            self.view = None
            vk.vkUnmapMemory(d, self.memory)
        vk.vkDestroyBuffer(d, self.handle, None)
        vk.vkFreeMemory(d, self.memory, None)
        self.handle = None


class Device:
    """Instance, the chosen physical device, a compute queue, and the kernels' shared layout."""

    def __init__(self) -> None:
        app = vk.VkApplicationInfo(pApplicationName="llamay", applicationVersion=1, pEngineName="llamay",
                                   engineVersion=1, apiVersion=vk.VK_MAKE_VERSION(1, 2, 0))
        inst_info = vk.VkInstanceCreateInfo(pApplicationInfo=app)
        self.instance = vk.vkCreateInstance(inst_info, None)
        physical = vk.vkEnumeratePhysicalDevices(self.instance)
        if not physical:
            raise RuntimeError("no Vulkan physical device")
        props = [vk.vkGetPhysicalDeviceProperties(p) for p in physical]
        order = sorted(range(len(physical)), key=lambda i: TYPE_PREFERENCE.index(props[i].deviceType)
                       if props[i].deviceType in TYPE_PREFERENCE else 9)
        self.physical, self.props = physical[order[0]], props[order[0]]
        families = vk.vkGetPhysicalDeviceQueueFamilyProperties(self.physical)
        compute = [i for i, f in enumerate(families) if f.queueFlags & vk.VK_QUEUE_COMPUTE_BIT]
        if not compute:
            raise RuntimeError(f"{self.props.deviceName} has no compute queue")
        self.queue_family = compute[0]
        self.features = self._query_features()
        if self.props.apiVersion < vk.VK_MAKE_VERSION(1, 1, 0):
            raise RuntimeError(f"{self.props.deviceName} supports only Vulkan {version_text(self.props.apiVersion)}")
        self.storage16 = bool(self.features["storageBuffer16BitAccess"])
        self.handle = self._create_device()
        self.queue = vk.vkGetDeviceQueue(self.handle, self.queue_family, 0)
        self.limits = self.props.limits
        self.max_binding = int(self.limits.maxStorageBufferRange)
        self.max_groups = int(self.limits.maxComputeWorkGroupCount[0])
        self._memory = vk.vkGetPhysicalDeviceMemoryProperties(self.physical)
        pool_info = vk.VkCommandPoolCreateInfo(queueFamilyIndex=self.queue_family,
                                               flags=vk.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT)
        self.command_pool = vk.vkCreateCommandPool(self.handle, pool_info, None)
        fence_info = vk.VkFenceCreateInfo()
        self.fence = vk.vkCreateFence(self.handle, fence_info, None)
        self._make_layouts()
        self._pipelines: dict[str, Any] = {}
        self._modules: list[Any] = []
        self._pools: list[Any] = []
        self._pool_left = 0
        self._barrier = vk.VkMemoryBarrier(srcAccessMask=ALL_MEMORY, dstAccessMask=ALL_MEMORY)
        self._barrier_ptr = vk.ffi.new("VkMemoryBarrier*", self._barrier)

    # ---- setup -------------------------------------------------------------------------------

    def _feature_chain(self) -> tuple[Any, Any, Any]:
        f12 = vk.VkPhysicalDeviceVulkan12Features()
        f11 = vk.VkPhysicalDeviceVulkan11Features(pNext=f12)
        f2 = vk.VkPhysicalDeviceFeatures2(pNext=f11)
        return f2, f11, f12

    def _query_features(self) -> dict[str, bool]:
        if self.props.apiVersion < vk.VK_MAKE_VERSION(1, 2, 0):
            f = vk.vkGetPhysicalDeviceFeatures(self.physical)
            return {"storageBuffer16BitAccess": False, "storageBuffer8BitAccess": False,
                    "shaderFloat16": False, "shaderInt8": False, "shaderInt16": bool(f.shaderInt16),
                    "shaderFloat64": bool(f.shaderFloat64)}
        f2, f11, f12 = self._feature_chain()
        vk.vkGetPhysicalDeviceFeatures2(self.physical, f2)
        return {"storageBuffer16BitAccess": bool(f11.storageBuffer16BitAccess),
                "storageBuffer8BitAccess": bool(f12.storageBuffer8BitAccess),
                "shaderFloat16": bool(f12.shaderFloat16), "shaderInt8": bool(f12.shaderInt8),
                "shaderInt16": bool(f2.features.shaderInt16), "shaderFloat64": bool(f2.features.shaderFloat64)}

    def _create_device(self) -> Any:
        priorities = vk.ffi.new("float[1]", [1.0])
        queue_info = vk.VkDeviceQueueCreateInfo(queueFamilyIndex=self.queue_family, queueCount=1,
                                                pQueuePriorities=priorities)
        queue_infos = [queue_info]
        chain = None
        if self.storage16:
            f12 = vk.VkPhysicalDeviceVulkan12Features()
            f11 = vk.VkPhysicalDeviceVulkan11Features(pNext=f12, storageBuffer16BitAccess=vk.VK_TRUE)
            features = vk.VkPhysicalDeviceFeatures(shaderInt16=vk.VK_TRUE if self.features["shaderInt16"] else 0)
            chain = vk.VkPhysicalDeviceFeatures2(pNext=f11, features=features)
            info = vk.VkDeviceCreateInfo(pNext=chain, queueCreateInfoCount=1, pQueueCreateInfos=queue_infos)
        else:
            info = vk.VkDeviceCreateInfo(queueCreateInfoCount=1, pQueueCreateInfos=queue_infos)
        handle = vk.vkCreateDevice(self.physical, info, None)
        del chain, queue_infos, priorities
        return handle

    def _make_layouts(self) -> None:
        bindings = [vk.VkDescriptorSetLayoutBinding(binding=i, descriptorType=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                                    descriptorCount=1, stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT)
                    for i in range(N_BINDINGS)]
        info = vk.VkDescriptorSetLayoutCreateInfo(bindingCount=N_BINDINGS, pBindings=bindings)
        self.set_layout = vk.vkCreateDescriptorSetLayout(self.handle, info, None)
        push = vk.VkPushConstantRange(stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT, offset=0, size=4 * PUSH_WORDS)
        layouts = [self.set_layout]
        pinfo = vk.VkPipelineLayoutCreateInfo(setLayoutCount=1, pSetLayouts=layouts, pushConstantRangeCount=1,
                                              pPushConstantRanges=[push])
        self.pipeline_layout = vk.vkCreatePipelineLayout(self.handle, pinfo, None)
        self.dummy = Buffer(self, 16, host_visible=False)

    def memory_type(self, type_bits: int, want: int) -> tuple[int, int]:
        """A memory type allowed by type_bits with the wanted flags (any allowed one otherwise)."""
        allowed = [i for i in range(self._memory.memoryTypeCount) if type_bits & (1 << i)]
        for i in allowed:
            flags = self._memory.memoryTypes[i].propertyFlags
            if flags & want == want:
                return i, flags
        if want & vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT:
            raise RuntimeError("no host-visible coherent memory type")
        return allowed[0], self._memory.memoryTypes[allowed[0]].propertyFlags

    # ---- kernels -----------------------------------------------------------------------------

    def pipeline(self, name: str) -> Any:
        """The compute pipeline of kernel `name` (an .spv in spv/), created on first use."""
        pipe = self._pipelines.get(name)
        if pipe is None:
            code = (SPV_DIR / f"{name}.spv").read_bytes()
            module_info = vk.VkShaderModuleCreateInfo(codeSize=len(code), pCode=code)
            module = vk.vkCreateShaderModule(self.handle, module_info, None)
            self._modules.append(module)
            stage = vk.VkPipelineShaderStageCreateInfo(stage=vk.VK_SHADER_STAGE_COMPUTE_BIT, module=module,
                                                       pName="main")
            info = vk.VkComputePipelineCreateInfo(stage=stage, layout=self.pipeline_layout)
            pipe = vk.vkCreateComputePipelines(self.handle, vk.VK_NULL_HANDLE, 1, [info], None)[0]
            del stage, info
            self._pipelines[name] = pipe
        return pipe

    def descriptor_set(self, buffers: Sequence[tuple[Buffer, int, int] | None]) -> Any:
        """A set binding (buffer, offset, size) at each slot; None slots get a dummy buffer."""
        if self._pool_left == 0:
            sizes = [vk.VkDescriptorPoolSize(type=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                             descriptorCount=256 * N_BINDINGS)]
            info = vk.VkDescriptorPoolCreateInfo(maxSets=256, poolSizeCount=1, pPoolSizes=sizes)
            self._pools.append(vk.vkCreateDescriptorPool(self.handle, info, None))
            self._pool_left = 256
        layouts = [self.set_layout]
        alloc = vk.VkDescriptorSetAllocateInfo(descriptorPool=self._pools[-1], descriptorSetCount=1,
                                               pSetLayouts=layouts)
        dset = vk.vkAllocateDescriptorSets(self.handle, alloc)[0]
        self._pool_left -= 1
        infos, writes = [], []
        for slot in range(N_BINDINGS):
            entry = buffers[slot] if slot < len(buffers) else None
            buf, offset, size = entry if entry is not None else (self.dummy, 0, self.dummy.size)
            info = vk.VkDescriptorBufferInfo(buffer=buf.handle, offset=offset, range=size)
            infos.append(info)
            writes.append(vk.VkWriteDescriptorSet(dstSet=dset, dstBinding=slot, descriptorCount=1,
                                                  descriptorType=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                                  pBufferInfo=[info]))
        vk.vkUpdateDescriptorSets(self.handle, len(writes), writes, 0, None)
        del infos, writes
        return dset

    def rebind(self, dset: Any, slot: int, buf: Buffer) -> None:
        """Point one binding of a set at another buffer (command buffers using it must be re-recorded)."""
        info = vk.VkDescriptorBufferInfo(buffer=buf.handle, offset=0, range=buf.size)
        infos = [info]
        write = vk.VkWriteDescriptorSet(dstSet=dset, dstBinding=slot, descriptorCount=1,
                                        descriptorType=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, pBufferInfo=infos)
        vk.vkUpdateDescriptorSets(self.handle, 1, [write], 0, None)
        del infos, write

    # ---- commands ----------------------------------------------------------------------------

    def command_buffer(self) -> Any:
        info = vk.VkCommandBufferAllocateInfo(commandPool=self.command_pool,
                                              level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, commandBufferCount=1)
        return vk.vkAllocateCommandBuffers(self.handle, info)[0]

    def free_command_buffer(self, cb: Any) -> None:
        vk.vkFreeCommandBuffers(self.handle, self.command_pool, 1, [cb])

    def begin(self, cb: Any) -> None:
        vk.vkBeginCommandBuffer(cb, vk.VkCommandBufferBeginInfo())

    def end(self, cb: Any) -> None:
        vk.vkEndCommandBuffer(cb)

    def barrier(self, cb: Any) -> None:
        """Every write so far is visible to every later read (compute, transfer and host)."""
        stages = vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | vk.VK_PIPELINE_STAGE_TRANSFER_BIT \
            | vk.VK_PIPELINE_STAGE_HOST_BIT
        vk.lib.vkCmdPipelineBarrier(cb, stages, stages, 0, 1, self._barrier_ptr, 0, vk.ffi.NULL, 0, vk.ffi.NULL)

    def dispatch(self, cb: Any, kernel: str, dset: Any, push: Sequence[int], groups: tuple[int, int, int]) -> None:
        vk.lib.vkCmdBindPipeline(cb, vk.VK_PIPELINE_BIND_POINT_COMPUTE, self.pipeline(kernel))
        sets = vk.ffi.new("VkDescriptorSet[1]", [dset])
        vk.lib.vkCmdBindDescriptorSets(cb, vk.VK_PIPELINE_BIND_POINT_COMPUTE, self.pipeline_layout, 0, 1, sets,
                                       0, vk.ffi.NULL)
        words = vk.ffi.new(f"uint32_t[{PUSH_WORDS}]", list(push) + [0] * (PUSH_WORDS - len(push)))
        vk.lib.vkCmdPushConstants(cb, self.pipeline_layout, vk.VK_SHADER_STAGE_COMPUTE_BIT, 0, 4 * PUSH_WORDS, words)
        vk.lib.vkCmdDispatch(cb, *groups)

    def copy(self, cb: Any, src: Buffer, src_offset: int, dst: Buffer, dst_offset: int, size: int) -> None:
        region = vk.VkBufferCopy(srcOffset=src_offset, dstOffset=dst_offset, size=size)
        vk.vkCmdCopyBuffer(cb, src.handle, dst.handle, 1, [region])

    def submit(self, cb: Any) -> None:
        """Submit one command buffer and wait for it."""
        cbs = [cb]
        info = vk.VkSubmitInfo(commandBufferCount=1, pCommandBuffers=cbs)
        vk.vkResetFences(self.handle, 1, [self.fence])
        vk.vkQueueSubmit(self.queue, 1, [info], self.fence)
        vk.vkWaitForFences(self.handle, 1, [self.fence], vk.VK_TRUE, 0xFFFFFFFFFFFFFFFF)
        del info, cbs

    def one_shot(self, record) -> None:
        cb = self.command_buffer()
        self.begin(cb)
        record(cb)
        self.end(cb)
        self.submit(cb)
        self.free_command_buffer(cb)

    def staged_write(self, dst: Buffer, raw: np.ndarray, offset: int) -> None:
        staging = Buffer(self, raw.size, host_visible=True)
        staging.write(raw)
        self.one_shot(lambda cb: self.copy(cb, staging, 0, dst, offset, raw.size))
        staging.release()

    def staged_read(self, src: Buffer, offset: int, size: int) -> bytes:
        staging = Buffer(self, size, host_visible=True)
        self.one_shot(lambda cb: (self.copy(cb, src, offset, staging, 0, size), self.barrier(cb)))
        data = staging.read(0, size)
        staging.release()
        return data

    # ---- description -------------------------------------------------------------------------

    def details(self) -> dict[str, Any]:
        """Device name, driver, API version, limits and features, for `llamay version -v`."""
        p, lim = self.props, self.props.limits
        driver = ""
        if p.apiVersion >= vk.VK_MAKE_VERSION(1, 2, 0):
            drv = vk.VkPhysicalDeviceDriverProperties()
            p2 = vk.VkPhysicalDeviceProperties2(pNext=drv)
            vk.vkGetPhysicalDeviceProperties2(self.physical, p2)
            driver = f"{vk.ffi.string(drv.driverName).decode()} ({vk.ffi.string(drv.driverInfo).decode()})"
            del p2
        heaps = [self._memory.memoryHeaps[i].size for i in range(self._memory.memoryHeapCount)]
        return {
            "device": str(p.deviceName), "device type": DEVICE_TYPES.get(p.deviceType, "?"),
            "driver": driver or f"version {p.driverVersion:#x}", "api version": version_text(p.apiVersion),
            "limits": (f"storage binding {lim.maxStorageBufferRange / 2**20:.0f} MiB · shared memory "
                       f"{lim.maxComputeSharedMemorySize // 1024} KiB · workgroup invocations "
                       f"{lim.maxComputeWorkGroupInvocations} · push constants {lim.maxPushConstantsSize} B · "
                       f"memory heaps {', '.join(f'{h / 2**30:.1f} GiB' for h in heaps)}"),
            "features": ", ".join(k for k, v in self.features.items() if v) or "none",
            "weight reads": "16-bit storage" if self.storage16 else "32-bit words (no 16-bit storage)",
        }
