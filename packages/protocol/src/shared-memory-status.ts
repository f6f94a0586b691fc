/** The shared-memory status entries of protocol.md §3.17 (HTTP JSON; gRPC maps them by name). */

/** One registered system shared-memory region. */
export interface SystemSharedMemoryStatus {
  name: string;
  key: string;
  offset: number;
  byte_size: number;
}

/** One registered CUDA shared-memory region. */
export interface CudaSharedMemoryStatus {
  name: string;
  device_id: number;
  byte_size: number;
}
