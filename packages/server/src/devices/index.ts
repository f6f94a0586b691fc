/**
 * GPUs and MIG instances: discovery through nvidia-smi, placement of KIND_GPU instances, and the
 * GPU metric samples. The only way into this folder from the rest of the server.
 */
export { DEFAULT_NVIDIA_SMI_TIMEOUT_MS, DeviceList, describeDevices, discoverDevices, restrictToVisible } from './discovery.js';
export type { Device, DiscoveryOptions, Gpu, MigInstance } from './discovery.js';
export { CUDA_VISIBLE_DEVICES_PARAMETER, MIG_DEVICES_PARAMETER, MigHolds, checkDevicePlacement } from './placement.js';
export type { PlacedDevice, Placement } from './placement.js';
export { parseComputeApps, parseGpuRows, parseGpuSamples, parseMigList, parseMigMemory } from './nvidia-smi.js';
export type { ComputeApp, GpuSample } from './nvidia-smi.js';
export { GpuSampler } from './gpu-sampler.js';
export type { GpuSamplerOptions } from './gpu-sampler.js';
