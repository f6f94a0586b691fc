/*
 * Direct ONNX Runtime sessions for the onnxruntime backend (packages/server/src/backends/
 * onnxruntime/native-session.ts): the C API of the libonnxruntime that onnxruntime-node ships,
 * opened at run time (`ortInit`), called without onnxruntime-node's binding in between.
 *
 * Why: for a small model the binding costs several times ONNX Runtime's own work. Each run it
 * looks every feed's fields up by name (interning the names again each time), builds an
 * `ort.Tensor` per output through its JavaScript constructor, and wraps the call in objects of its
 * own; for Triton's `simple` (INT32 [1, 16] add and subtract) that is about 35 µs per run on the
 * machines we measure, where ONNX Runtime's `Run` with the same session options takes about 7.
 * Here a run is one call: inputs are viewed where they lie (no copy), outputs are copied once into
 * fresh ArrayBuffers, their types and shapes written into a caller-owned Float64Array.
 *
 * Only numeric tensors pass through here; a model with a STRING (or a non-tensor) input or output
 * keeps the binding (the JavaScript side decides from what `ortLoad` reports).
 *
 * The ABI: the OrtApi table is a struct of function pointers that only ever grows at its end, so a
 * function's index in it is fixed for every release. The indices used are listed below, with each
 * function's C signature; `ortInit` asks for API version 11 (ONNX Runtime 1.11), which has all of
 * them, and any later library answers it.
 */
#define NAPI_VERSION 8
#include <node_api.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct OrtStatus OrtStatus;
typedef struct OrtEnv OrtEnv;
typedef struct OrtSession OrtSession;
typedef struct OrtSessionOptions OrtSessionOptions;
typedef struct OrtValue OrtValue;
typedef struct OrtMemoryInfo OrtMemoryInfo;
typedef struct OrtTypeInfo OrtTypeInfo;
typedef struct OrtTensorTypeAndShapeInfo OrtTensorTypeAndShapeInfo;
typedef struct OrtAllocator OrtAllocator;

typedef struct {
  const void *(*GetApi)(uint32_t version);
  const char *(*GetVersionString)(void);
} OrtApiBase;

/* Indices into OrtApi (onnxruntime_c_api.h, `struct OrtApi`). */
enum {
  ORT_GET_ERROR_MESSAGE = 2,       /* const char *(const OrtStatus *) */
  ORT_CREATE_ENV = 3,              /* (int logging_level, const char *logid, OrtEnv **) */
  ORT_CREATE_SESSION = 7,          /* (const OrtEnv *, const char *path, const OrtSessionOptions *, OrtSession **) */
  ORT_RUN = 9,                     /* (OrtSession *, const OrtRunOptions *, const char *const *, const OrtValue *const *, size_t, const char *const *, size_t, OrtValue **) */
  ORT_CREATE_SESSION_OPTIONS = 10, /* (OrtSessionOptions **) */
  ORT_SET_EXECUTION_MODE = 13,     /* (OrtSessionOptions *, int mode) */
  ORT_ENABLE_MEM_PATTERN = 16,     /* (OrtSessionOptions *) */
  ORT_DISABLE_MEM_PATTERN = 17,
  ORT_ENABLE_CPU_MEM_ARENA = 18,
  ORT_DISABLE_CPU_MEM_ARENA = 19,
  ORT_SET_OPTIMIZATION_LEVEL = 23, /* (OrtSessionOptions *, int level) */
  ORT_SET_INTRA_OP_THREADS = 24,   /* (OrtSessionOptions *, int) */
  ORT_SET_INTER_OP_THREADS = 25,
  ORT_SESSION_INPUT_COUNT = 30,    /* (const OrtSession *, size_t *) */
  ORT_SESSION_OUTPUT_COUNT = 31,
  ORT_SESSION_INPUT_TYPE = 33,     /* (const OrtSession *, size_t, OrtTypeInfo **) */
  ORT_SESSION_OUTPUT_TYPE = 34,
  ORT_SESSION_INPUT_NAME = 36,     /* (const OrtSession *, size_t, OrtAllocator *, char **) */
  ORT_SESSION_OUTPUT_NAME = 37,
  ORT_CREATE_TENSOR_WITH_DATA = 49, /* (const OrtMemoryInfo *, void *, size_t bytes, const int64_t *shape, size_t rank, int type, OrtValue **) */
  ORT_TENSOR_DATA = 51,            /* (OrtValue *, void **) */
  ORT_TYPE_INFO_TENSOR_INFO = 55,  /* (const OrtTypeInfo *, const OrtTensorTypeAndShapeInfo **) */
  ORT_TYPE_INFO_ONNX_TYPE = 56,    /* (const OrtTypeInfo *, int *onnx_type) */
  ORT_TENSOR_ELEMENT_TYPE = 60,    /* (const OrtTensorTypeAndShapeInfo *, int *) */
  ORT_DIMENSIONS_COUNT = 61,       /* (const OrtTensorTypeAndShapeInfo *, size_t *) */
  ORT_DIMENSIONS = 62,             /* (const OrtTensorTypeAndShapeInfo *, int64_t *, size_t) */
  ORT_ELEMENT_COUNT = 64,          /* (const OrtTensorTypeAndShapeInfo *, size_t *) */
  ORT_TENSOR_TYPE_AND_SHAPE = 65,  /* (const OrtValue *, OrtTensorTypeAndShapeInfo **) */
  ORT_CREATE_CPU_MEMORY_INFO = 69, /* (int allocator_type, int mem_type, OrtMemoryInfo **) */
  ORT_ALLOCATOR_FREE = 76,         /* (OrtAllocator *, void *) */
  ORT_DEFAULT_ALLOCATOR = 78,      /* (OrtAllocator **) */
  ORT_RELEASE_STATUS = 93,         /* void (OrtStatus *), and the releases below alike */
  ORT_RELEASE_SESSION = 95,
  ORT_RELEASE_VALUE = 96,
  ORT_RELEASE_TYPE_INFO = 98,
  ORT_RELEASE_TENSOR_INFO = 99,
  ORT_RELEASE_SESSION_OPTIONS = 100,
  ORT_ADD_SESSION_CONFIG = 130, /* (OrtSessionOptions *, const char *key, const char *value) */
};

#define ORT_LOGGING_LEVEL_WARNING 2
#define ORT_ARENA_ALLOCATOR 1
#define ORT_MEM_TYPE_DEFAULT 0
#define ONNX_TYPE_TENSOR 1
/* The most dimensions an output may have; `meta` holds 2 + this many numbers per output. */
#define MAX_RANK 64
#define META_STRIDE (2 + MAX_RANK)

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static void *const *api;
static OrtEnv *env_handle;
static OrtMemoryInfo *cpu_memory;
static char version[64];

#define FN(index, type) ((type)api[index])
typedef void (*release_fn_t)(void *);

static void release(int index, void *object) {
  if (object != NULL) FN(index, release_fn_t)(object);
}

/* Throws ONNX Runtime's message for `status` (releasing it); returns 1 when there was one. */
static int throw_status(napi_env env, OrtStatus *status, const char *context) {
  if (status == NULL) return 0;
  const char *message = FN(ORT_GET_ERROR_MESSAGE, const char *(*)(OrtStatus *))(status);
  if (context == NULL) {
    napi_throw_error(env, "ERR_ORT", message);
  } else {
    char text[1024];
    snprintf(text, sizeof text, "%s: %s", context, message);
    napi_throw_error(env, "ERR_ORT", text);
  }
  release(ORT_RELEASE_STATUS, status);
  return 1;
}

#define NAPI_OK(call)                                                         \
  do {                                                                        \
    if ((call) != napi_ok) {                                                  \
      napi_throw_error(env, NULL, "nereid native: Node-API call failed: " #call); \
      goto fail;                                                              \
    }                                                                         \
  } while (0)

/* Bytes per element of an ONNX tensor element type; 0 for types this path does not carry. */
static size_t element_size(int type) {
  switch (type) {
    case 2: case 3: case 9: return 1;            /* uint8, int8, bool */
    case 4: case 5: case 10: return 2;           /* uint16, int16, float16 */
    case 1: case 6: case 12: return 4;           /* float, int32, uint32 */
    case 7: case 11: case 13: return 8;          /* int64, double, uint64 */
    default: return 0;
  }
}

static size_t typed_array_element_size(napi_typedarray_type type) {
  switch (type) {
    case napi_int8_array: case napi_uint8_array: case napi_uint8_clamped_array: return 1;
    case napi_int16_array: case napi_uint16_array: return 2;
    case napi_int32_array: case napi_uint32_array: case napi_float32_array: return 4;
    default: return 8;
  }
}

static char *string_argument(napi_env env, napi_value value) {
  size_t length;
  if (napi_get_value_string_utf8(env, value, NULL, 0, &length) != napi_ok) return NULL;
  char *text = malloc(length + 1);
  if (text == NULL) return NULL;
  napi_get_value_string_utf8(env, value, text, length + 1, &length);
  return text;
}

/* ortInit(libraryPath) -> ONNX Runtime's version. Opens the library once per process. */
static napi_value ort_init(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1], result;
  char *path = NULL;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 || (path = string_argument(env, argv[0])) == NULL) {
    napi_throw_type_error(env, NULL, "nereid native: ortInit(libraryPath)");
    return NULL;
  }
  pthread_mutex_lock(&init_lock);
  const char *failure = NULL;
  char text[1024];
  if (api == NULL) {
    void *library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    const OrtApiBase *(*get_base)(void) = library == NULL ? NULL : (const OrtApiBase *(*)(void))dlsym(library, "OrtGetApiBase");
    const OrtApiBase *base = get_base == NULL ? NULL : get_base();
    void *const *table = base == NULL ? NULL : (void *const *)base->GetApi(11);
    if (table == NULL) {
      snprintf(text, sizeof text, "cannot open ONNX Runtime's C API in %s: %s", path, library == NULL ? dlerror() : "no OrtGetApiBase or API version 11");
      failure = text;
    } else {
      api = table;
      snprintf(version, sizeof version, "%s", base->GetVersionString());
      OrtStatus *status = FN(ORT_CREATE_ENV, OrtStatus *(*)(int, const char *, OrtEnv **))(ORT_LOGGING_LEVEL_WARNING, "nereid", &env_handle);
      if (status == NULL) status = FN(ORT_CREATE_CPU_MEMORY_INFO, OrtStatus *(*)(int, int, OrtMemoryInfo **))(ORT_ARENA_ALLOCATOR, ORT_MEM_TYPE_DEFAULT, &cpu_memory);
      if (status != NULL) {
        snprintf(text, sizeof text, "ONNX Runtime's environment: %s", FN(ORT_GET_ERROR_MESSAGE, const char *(*)(OrtStatus *))(status));
        release(ORT_RELEASE_STATUS, status);
        api = NULL;
        failure = text;
      }
    }
  }
  pthread_mutex_unlock(&init_lock);
  free(path);
  if (failure != NULL) {
    napi_throw_error(env, "ERR_ORT_INIT", failure);
    return NULL;
  }
  if (napi_create_string_utf8(env, version, NAPI_AUTO_LENGTH, &result) != napi_ok) return NULL;
  return result;
}

typedef struct {
  OrtSession *session;
  size_t inputs, outputs;
  char **input_names, **output_names;
} session_t;

static const napi_type_tag SESSION_TAG = {0x6e657265696453ULL, 0x4f52545345535331ULL};

static void free_names(char **names, size_t count) {
  if (names == NULL) return;
  for (size_t i = 0; i < count; i++) free(names[i]);
  free(names);
}

static void session_free(session_t *s) {
  if (s->session != NULL) release(ORT_RELEASE_SESSION, s->session);
  s->session = NULL;
  free_names(s->input_names, s->inputs);
  free_names(s->output_names, s->outputs);
  s->input_names = s->output_names = NULL;
}

static void session_finalize(napi_env env, void *data, void *hint) {
  (void)env;
  (void)hint;
  session_free(data);
  free(data);
}

/*
 * Names and element types of a session's inputs or outputs: `names` gets copies (malloc), `types`
 * the ONNX element type of each, -1 for what is not a tensor.
 */
static OrtStatus *describe(OrtSession *session, int outputs, size_t count, char ***names, napi_env env, napi_value types) {
  OrtAllocator *allocator;
  OrtStatus *status = FN(ORT_DEFAULT_ALLOCATOR, OrtStatus *(*)(OrtAllocator **))(&allocator);
  if (status != NULL) return status;
  *names = calloc(count == 0 ? 1 : count, sizeof(char *));
  for (size_t i = 0; i < count && status == NULL; i++) {
    char *name;
    status = FN(outputs ? ORT_SESSION_OUTPUT_NAME : ORT_SESSION_INPUT_NAME, OrtStatus *(*)(OrtSession *, size_t, OrtAllocator *, char **))(session, i, allocator, &name);
    if (status != NULL) break;
    (*names)[i] = strdup(name);
    FN(ORT_ALLOCATOR_FREE, OrtStatus *(*)(OrtAllocator *, void *))(allocator, name);
    OrtTypeInfo *type_info;
    status = FN(outputs ? ORT_SESSION_OUTPUT_TYPE : ORT_SESSION_INPUT_TYPE, OrtStatus *(*)(OrtSession *, size_t, OrtTypeInfo **))(session, i, &type_info);
    if (status != NULL) break;
    int onnx_type = 0, element = -1;
    status = FN(ORT_TYPE_INFO_ONNX_TYPE, OrtStatus *(*)(const OrtTypeInfo *, int *))(type_info, &onnx_type);
    if (status == NULL && onnx_type == ONNX_TYPE_TENSOR) {
      const OrtTensorTypeAndShapeInfo *tensor;
      status = FN(ORT_TYPE_INFO_TENSOR_INFO, OrtStatus *(*)(const OrtTypeInfo *, const OrtTensorTypeAndShapeInfo **))(type_info, &tensor);
      if (status == NULL) status = FN(ORT_TENSOR_ELEMENT_TYPE, OrtStatus *(*)(const OrtTensorTypeAndShapeInfo *, int *))(tensor, &element);
    }
    release(ORT_RELEASE_TYPE_INFO, type_info);
    napi_value v;
    napi_create_int32(env, element, &v);
    napi_set_element(env, types, (uint32_t)i, v);
  }
  return status;
}

/*
 * ortLoad(path, intraOpThreads, interOpThreads, optimizationLevel, parallel, memArena,
 *         memPattern, config: string[] of key, value pairs)
 *   -> { session, inputs: string[], inputTypes: number[], outputs: string[], outputTypes: number[] }
 * Loads the model on the calling thread. Throws ONNX Runtime's load error.
 */
static napi_value ort_load(napi_env env, napi_callback_info info) {
  size_t argc = 8;
  napi_value argv[8], result = NULL, external, inputs, outputs, input_types, output_types, v;
  char *path = NULL;
  OrtSessionOptions *options = NULL;
  session_t *s = NULL;
  int32_t intra, inter, level;
  bool parallel, arena, pattern;
  uint32_t pairs = 0;
  if (api == NULL) {
    napi_throw_error(env, NULL, "nereid native: ortInit first");
    return NULL;
  }
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 8 || (path = string_argument(env, argv[0])) == NULL ||
      napi_get_value_int32(env, argv[1], &intra) != napi_ok || napi_get_value_int32(env, argv[2], &inter) != napi_ok ||
      napi_get_value_int32(env, argv[3], &level) != napi_ok || napi_get_value_bool(env, argv[4], &parallel) != napi_ok ||
      napi_get_value_bool(env, argv[5], &arena) != napi_ok || napi_get_value_bool(env, argv[6], &pattern) != napi_ok ||
      napi_get_array_length(env, argv[7], &pairs) != napi_ok) {
    free(path);
    napi_throw_type_error(env, NULL, "nereid native: ortLoad(path, intra, inter, level, parallel, arena, pattern, config[])");
    return NULL;
  }
  OrtStatus *status = FN(ORT_CREATE_SESSION_OPTIONS, OrtStatus *(*)(OrtSessionOptions **))(&options);
  if (status == NULL) status = FN(ORT_SET_INTRA_OP_THREADS, OrtStatus *(*)(OrtSessionOptions *, int))(options, intra);
  if (status == NULL) status = FN(ORT_SET_INTER_OP_THREADS, OrtStatus *(*)(OrtSessionOptions *, int))(options, inter);
  if (status == NULL) status = FN(ORT_SET_OPTIMIZATION_LEVEL, OrtStatus *(*)(OrtSessionOptions *, int))(options, level);
  if (status == NULL) status = FN(ORT_SET_EXECUTION_MODE, OrtStatus *(*)(OrtSessionOptions *, int))(options, parallel ? 1 : 0);
  if (status == NULL) status = FN(arena ? ORT_ENABLE_CPU_MEM_ARENA : ORT_DISABLE_CPU_MEM_ARENA, OrtStatus *(*)(OrtSessionOptions *))(options);
  if (status == NULL) status = FN(pattern ? ORT_ENABLE_MEM_PATTERN : ORT_DISABLE_MEM_PATTERN, OrtStatus *(*)(OrtSessionOptions *))(options);
  for (uint32_t i = 0; status == NULL && i + 1 < pairs; i += 2) {
    napi_value key, value;
    char *k = NULL, *val = NULL;
    if (napi_get_element(env, argv[7], i, &key) == napi_ok && napi_get_element(env, argv[7], i + 1, &value) == napi_ok) {
      k = string_argument(env, key);
      val = string_argument(env, value);
    }
    if (k != NULL && val != NULL) status = FN(ORT_ADD_SESSION_CONFIG, OrtStatus *(*)(OrtSessionOptions *, const char *, const char *))(options, k, val);
    free(k);
    free(val);
  }
  if (throw_status(env, status, NULL)) goto fail;
  s = calloc(1, sizeof *s);
  if (s == NULL) {
    napi_throw_error(env, NULL, "nereid native: out of memory");
    goto fail;
  }
  status = FN(ORT_CREATE_SESSION, OrtStatus *(*)(OrtEnv *, const char *, OrtSessionOptions *, OrtSession **))(env_handle, path, options, &s->session);
  if (status == NULL) status = FN(ORT_SESSION_INPUT_COUNT, OrtStatus *(*)(OrtSession *, size_t *))(s->session, &s->inputs);
  if (status == NULL) status = FN(ORT_SESSION_OUTPUT_COUNT, OrtStatus *(*)(OrtSession *, size_t *))(s->session, &s->outputs);
  if (throw_status(env, status, NULL)) goto fail;
  NAPI_OK(napi_create_array_with_length(env, s->inputs, &input_types));
  NAPI_OK(napi_create_array_with_length(env, s->outputs, &output_types));
  status = describe(s->session, 0, s->inputs, &s->input_names, env, input_types);
  if (status == NULL) status = describe(s->session, 1, s->outputs, &s->output_names, env, output_types);
  if (throw_status(env, status, "reading the model's inputs and outputs")) goto fail;
  NAPI_OK(napi_create_array_with_length(env, s->inputs, &inputs));
  for (size_t i = 0; i < s->inputs; i++) {
    NAPI_OK(napi_create_string_utf8(env, s->input_names[i], NAPI_AUTO_LENGTH, &v));
    NAPI_OK(napi_set_element(env, inputs, (uint32_t)i, v));
  }
  NAPI_OK(napi_create_array_with_length(env, s->outputs, &outputs));
  for (size_t i = 0; i < s->outputs; i++) {
    NAPI_OK(napi_create_string_utf8(env, s->output_names[i], NAPI_AUTO_LENGTH, &v));
    NAPI_OK(napi_set_element(env, outputs, (uint32_t)i, v));
  }
  NAPI_OK(napi_create_external(env, s, session_finalize, NULL, &external));
  s = NULL; /* the external's finalizer owns it now */
  NAPI_OK(napi_type_tag_object(env, external, &SESSION_TAG));
  NAPI_OK(napi_create_object(env, &result));
  NAPI_OK(napi_set_named_property(env, result, "session", external));
  NAPI_OK(napi_set_named_property(env, result, "inputs", inputs));
  NAPI_OK(napi_set_named_property(env, result, "inputTypes", input_types));
  NAPI_OK(napi_set_named_property(env, result, "outputs", outputs));
  NAPI_OK(napi_set_named_property(env, result, "outputTypes", output_types));
  release(ORT_RELEASE_SESSION_OPTIONS, options);
  free(path);
  return result;
fail:
  if (s != NULL) {
    session_free(s);
    free(s);
  }
  release(ORT_RELEASE_SESSION_OPTIONS, options);
  free(path);
  return NULL;
}

static session_t *session_argument(napi_env env, napi_value value) {
  bool tagged = false;
  void *data = NULL;
  if (napi_check_object_type_tag(env, value, &SESSION_TAG, &tagged) != napi_ok || !tagged || napi_get_value_external(env, value, &data) != napi_ok) {
    napi_throw_type_error(env, NULL, "nereid native: not an ONNX Runtime session");
    return NULL;
  }
  session_t *s = data;
  if (s->session == NULL) {
    napi_throw_error(env, NULL, "nereid native: the ONNX Runtime session was released");
    return NULL;
  }
  return s;
}

/* ortRelease(session): releases the session's native memory and threads now. */
static napi_value ort_release(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1) return NULL;
  session_t *s = session_argument(env, argv[0]);
  if (s != NULL) session_free(s);
  return NULL;
}

/* At most this many inputs and outputs in one run without a heap allocation. */
#define SMALL_IO 16

/*
 * ortRun(session, inputs, outputs: Uint32Array, meta: Float64Array) -> ArrayBuffer[]
 *   inputs: a flat array of (input index, ONNX element type, dims: number[], data: typed array)
 *   outputs: the indices of the outputs wanted, in the order the buffers come back
 *   meta: for output k, at k * (2 + 64): its element type, its rank, then its dimensions
 * Computes on the calling thread; the inputs are read where they lie. Throws ONNX Runtime's error.
 */
static napi_value ort_run(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4], result = NULL;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 4) {
    napi_throw_type_error(env, NULL, "nereid native: ortRun(session, inputs, outputs, meta)");
    return NULL;
  }
  session_t *s = session_argument(env, argv[0]);
  if (s == NULL) return NULL;
  uint32_t flat = 0;
  napi_typedarray_type kind;
  size_t wanted = 0, meta_length = 0;
  void *wanted_data = NULL, *meta_data = NULL;
  if (napi_get_array_length(env, argv[1], &flat) != napi_ok ||
      napi_get_typedarray_info(env, argv[2], &kind, &wanted, &wanted_data, NULL, NULL) != napi_ok || kind != napi_uint32_array ||
      napi_get_typedarray_info(env, argv[3], &kind, &meta_length, &meta_data, NULL, NULL) != napi_ok || kind != napi_float64_array) {
    napi_throw_type_error(env, NULL, "nereid native: ortRun(session, inputs, outputs: Uint32Array, meta: Float64Array)");
    return NULL;
  }
  size_t count = flat / 4;
  if (count > s->inputs || wanted > s->outputs || wanted == 0 || meta_length < wanted * META_STRIDE) {
    napi_throw_range_error(env, NULL, "nereid native: ortRun: more inputs or outputs than the model has, or meta too short");
    return NULL;
  }
  const uint32_t *wanted_index = wanted_data;
  double *meta = meta_data;
  const char *small_in_names[SMALL_IO], *small_out_names[SMALL_IO];
  OrtValue *small_in[SMALL_IO], *small_out[SMALL_IO];
  const char **in_names = count <= SMALL_IO ? small_in_names : calloc(count, sizeof(char *));
  OrtValue **in_values = count <= SMALL_IO ? small_in : calloc(count, sizeof(OrtValue *));
  const char **out_names = wanted <= SMALL_IO ? small_out_names : calloc(wanted, sizeof(char *));
  OrtValue **out_values = wanted <= SMALL_IO ? small_out : calloc(wanted, sizeof(OrtValue *));
  size_t made = 0;
  if (out_values != NULL)
    for (size_t k = 0; k < wanted; k++) out_values[k] = NULL;
  if (in_names == NULL || in_values == NULL || out_names == NULL || out_values == NULL) {
    napi_throw_error(env, NULL, "nereid native: out of memory");
    goto fail;
  }
  for (size_t k = 0; k < wanted; k++) {
    if (wanted_index[k] >= s->outputs) {
      napi_throw_range_error(env, NULL, "nereid native: ortRun: no such output");
      goto fail;
    }
    out_names[k] = s->output_names[wanted_index[k]];
  }
  for (size_t i = 0; i < count; i++) {
    napi_value index_value, type_value, dims_value, data_value, dim;
    uint32_t index, rank;
    int32_t type;
    int64_t dims[MAX_RANK];
    NAPI_OK(napi_get_element(env, argv[1], (uint32_t)(4 * i), &index_value));
    NAPI_OK(napi_get_element(env, argv[1], (uint32_t)(4 * i + 1), &type_value));
    NAPI_OK(napi_get_element(env, argv[1], (uint32_t)(4 * i + 2), &dims_value));
    NAPI_OK(napi_get_element(env, argv[1], (uint32_t)(4 * i + 3), &data_value));
    NAPI_OK(napi_get_value_uint32(env, index_value, &index));
    NAPI_OK(napi_get_value_int32(env, type_value, &type));
    NAPI_OK(napi_get_array_length(env, dims_value, &rank));
    size_t size = element_size(type);
    if (index >= s->inputs || size == 0 || rank > MAX_RANK) {
      napi_throw_range_error(env, NULL, "nereid native: ortRun: bad input index, element type or rank");
      goto fail;
    }
    uint64_t elements = 1;
    for (uint32_t d = 0; d < rank; d++) {
      NAPI_OK(napi_get_element(env, dims_value, d, &dim));
      NAPI_OK(napi_get_value_int64(env, dim, &dims[d]));
      if (dims[d] < 0) {
        napi_throw_range_error(env, NULL, "nereid native: ortRun: a negative dimension");
        goto fail;
      }
      elements *= (uint64_t)dims[d];
    }
    size_t length;
    void *data;
    NAPI_OK(napi_get_typedarray_info(env, data_value, &kind, &length, &data, NULL, NULL));
    size_t bytes = length * typed_array_element_size(kind);
    if (bytes != elements * size) {
      char text[512];
      snprintf(text, sizeof text, "nereid native: input '%s' has %zu bytes where its shape and type need %llu", s->input_names[index], bytes, (unsigned long long)(elements * size));
      napi_throw_range_error(env, NULL, text);
      goto fail;
    }
    static uint64_t empty;
    in_names[i] = s->input_names[index];
    OrtStatus *status = FN(ORT_CREATE_TENSOR_WITH_DATA, OrtStatus *(*)(const OrtMemoryInfo *, void *, size_t, const int64_t *, size_t, int, OrtValue **))(
        cpu_memory, data == NULL ? (void *)&empty : data, bytes, dims, rank, type, &in_values[i]);
    if (throw_status(env, status, NULL)) goto fail;
    made++;
  }
  OrtStatus *status = FN(ORT_RUN, OrtStatus *(*)(OrtSession *, const void *, const char *const *, const OrtValue *const *, size_t, const char *const *, size_t, OrtValue **))(
      s->session, NULL, in_names, (const OrtValue *const *)in_values, count, out_names, wanted, out_values);
  if (throw_status(env, status, NULL)) goto fail;
  NAPI_OK(napi_create_array_with_length(env, wanted, &result));
  for (size_t k = 0; k < wanted; k++) {
    OrtTensorTypeAndShapeInfo *shape = NULL;
    int type = 0;
    size_t rank = 0, elements = 0;
    void *data = NULL;
    status = FN(ORT_TENSOR_TYPE_AND_SHAPE, OrtStatus *(*)(const OrtValue *, OrtTensorTypeAndShapeInfo **))(out_values[k], &shape);
    if (status == NULL) status = FN(ORT_TENSOR_ELEMENT_TYPE, OrtStatus *(*)(const OrtTensorTypeAndShapeInfo *, int *))(shape, &type);
    if (status == NULL) status = FN(ORT_DIMENSIONS_COUNT, OrtStatus *(*)(const OrtTensorTypeAndShapeInfo *, size_t *))(shape, &rank);
    if (status == NULL && rank <= MAX_RANK) {
      int64_t dims[MAX_RANK];
      status = FN(ORT_DIMENSIONS, OrtStatus *(*)(const OrtTensorTypeAndShapeInfo *, int64_t *, size_t))(shape, dims, rank);
      for (size_t d = 0; status == NULL && d < rank; d++) meta[k * META_STRIDE + 2 + d] = (double)dims[d];
    }
    if (status == NULL) status = FN(ORT_ELEMENT_COUNT, OrtStatus *(*)(const OrtTensorTypeAndShapeInfo *, size_t *))(shape, &elements);
    release(ORT_RELEASE_TENSOR_INFO, shape);
    if (status == NULL && (rank > MAX_RANK || element_size(type) == 0)) {
      char text[256];
      snprintf(text, sizeof text, "nereid native: output '%s' has element type %d or rank %zu, which this path does not carry", out_names[k], type, rank);
      napi_throw_error(env, NULL, text);
      result = NULL;
      goto fail;
    }
    if (status == NULL && elements > 0) status = FN(ORT_TENSOR_DATA, OrtStatus *(*)(OrtValue *, void **))(out_values[k], &data);
    if (throw_status(env, status, NULL)) {
      result = NULL;
      goto fail;
    }
    meta[k * META_STRIDE] = type;
    meta[k * META_STRIDE + 1] = (double)rank;
    size_t bytes = elements * element_size(type);
    void *copy;
    napi_value buffer;
    if (napi_create_arraybuffer(env, bytes, &copy, &buffer) != napi_ok || napi_set_element(env, result, (uint32_t)k, buffer) != napi_ok) {
      napi_throw_error(env, NULL, "nereid native: cannot allocate an output buffer");
      result = NULL;
      goto fail;
    }
    if (bytes > 0) memcpy(copy, data, bytes);
  }
fail:
  for (size_t i = 0; i < made; i++) release(ORT_RELEASE_VALUE, in_values[i]);
  if (out_values != NULL)
    for (size_t k = 0; k < wanted; k++) release(ORT_RELEASE_VALUE, out_values[k]);
  if (in_names != small_in_names) free((void *)in_names);
  if (in_values != small_in) free(in_values);
  if (out_names != small_out_names) free((void *)out_names);
  if (out_values != small_out) free(out_values);
  return result;
}

int nereid_ort_define(napi_env env, napi_value exports) {
  napi_property_descriptor properties[] = {
      {"ortInit", NULL, ort_init, NULL, NULL, NULL, napi_default, NULL},
      {"ortLoad", NULL, ort_load, NULL, NULL, NULL, napi_default, NULL},
      {"ortRun", NULL, ort_run, NULL, NULL, NULL, napi_default, NULL},
      {"ortRelease", NULL, ort_release, NULL, NULL, NULL, napi_default, NULL},
  };
  return napi_define_properties(env, exports, sizeof properties / sizeof properties[0], properties) == napi_ok ? 0 : -1;
}
