/**
 * The intra-op thread count of a framework runtime's instance when the model does not set one,
 * shared by the ONNX Runtime backend (`intra_op_thread_count`) and the PyTorch runner in the
 * Python stub (`INTRA_OP_THREAD_COUNT`, handed to the stub at initialize).
 */

/**
 * The cores but one, divided among the model's instances, at least one. The core left over is the
 * event loop's: it receives, decodes, batches and answers every request, and when the runtime's
 * threads take every core they contend with it, and with each other at the barriers of each
 * parallel section (measured on 2 cores, the MLP example under 64 streaming clients: 9.2-10.0k
 * inferences/s with one thread against 7.8k with two, the server's CPU per request 150-164 µs
 * against 188-213).
 */
export function defaultIntraOpThreads(cores: number, instanceCount: number): number {
  return Math.max(1, Math.floor((cores - 1) / Math.max(1, instanceCount)));
}
