/*
 * Nereid's native addon: plain C against Node-API, compiled by scripts/build-native.mjs.
 *
 * Memory mappings of shared-memory files. Node has no mmap; positioned read/write on this kind of
 * machine copy at 1.5-3 GB/s where a plain memory copy moves 6-10 GB/s.
 *
 * Guarded mappings (`map`, the Python backend's tensor rings) never leave this file as memory
 * JavaScript could touch: JavaScript asks for copies into and out of its own buffers (`copy`),
 * and every copy runs under a SIGBUS guard. Client regions are shared mappings instead (below).
 * A file that another process shrinks underneath a mapping makes the next access to the lost
 * pages raise SIGBUS; inside a guarded copy the handler jumps back out of the copy and the call
 * returns false, so the caller fails the one request instead of the process dying. A SIGBUS
 * anywhere else is handed to the disposition that was in place before this module loaded.
 *
 * Without the addon the server falls back to positioned reads and writes
 * (packages/server/src/core/mapped-file.ts).
 *
 * Slabs: anonymous memory every thread of the process can view (packages/server/src/core/slabs.ts).
 * A request body read on the main thread into a slab is an ONNX Runtime worker's input as it
 * is, named by its id in a message: no copy into a buffer to transfer, and no buffer moving
 * between the threads' heaps, where every arrival counts as fresh external memory and drives V8
 * into full collections. Slabs are never unmapped (a view any thread still holds stays valid);
 * free slabs beyond an idle budget give their pages back to the kernel.
 *
 * Shared mappings: a client's shared-memory region mapped once at registration and entered in the
 * slab table (`shareMap`), so that every thread views it by id like a slab: a request's input is
 * the region's bytes where they lie, read by an ONNX Runtime worker without a copy, and an output
 * can be written into the region by the thread that produced it. A view is ordinary memory to
 * JavaScript and to ONNX Runtime, so a fault on it cannot be guarded by a copy's jump: instead the
 * SIGBUS handler, for an address inside a shared mapping, maps anonymous zeroed memory over the
 * whole mapping and marks it damaged (`shareDamaged`), and the faulting access resumes on that
 * memory. The request then fails on the mark, the server keeps running, and the region stays
 * refused until it is registered again.
 */
#define NAPI_VERSION 8
#include <node_api.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

typedef struct {
  uint8_t *base; /* NULL once unmapped */
  size_t length;
} mapping_t;

/* ---- the slab table (slabs and shared mappings; functions below) ---- */

#define SLAB_LIMIT 4096
/* Address space all slabs may take together; beyond it slabTake answers -1. */
#define SLAB_MAX_BYTES ((size_t)8 << 30)
/* Free slabs keep their pages up to this many bytes together; others are discarded. */
#define SLAB_IDLE_RESIDENT_BYTES ((size_t)256 << 20)
#define HUGE_PAGE ((size_t)2 << 20)

/* What a table entry holds. */
enum { ENTRY_SLAB = 0, ENTRY_SHARED = 1, ENTRY_DEAD = 2 };

/*
 * One entry of the table: a slab, or a shared mapping. The signal handler reads `kind`, `base`
 * and `length` without the lock (atomically); they are written under the lock, `kind` last when
 * an entry comes alive and first when it dies.
 */
typedef struct {
  uint8_t *base;
  size_t length;
  bool free;
  bool resident;
  int kind;
  /* A shared entry's generation: part of its id, so an id outlives its mapping harmlessly. */
  int generation;
  int damaged;
} slab_t;

/* Ids: the entry's index in the low bits, its generation above (always 0 for slabs). */
/* slabs.ts reads the same layout (SLOT_MASK). */
#define ID_SLOT_BITS 12
#define ID_SLOT_MASK ((1 << ID_SLOT_BITS) - 1)
#define ID_MAX_GENERATION ((1 << (31 - ID_SLOT_BITS)) - 1)

static slab_t slab_table[SLAB_LIMIT];
static int slab_count = 0;
static size_t slab_mapped = 0;
static size_t slab_idle_resident = 0;
static pthread_mutex_t slab_lock = PTHREAD_MUTEX_INITIALIZER;

static __thread sigjmp_buf *volatile guard_jump = NULL;
static struct sigaction previous_bus;
static pthread_once_t install_once = PTHREAD_ONCE_INIT;
static int install_error = 0;

/*
 * A fault inside a shared mapping (the client shrank its object): the mapping's pages are
 * replaced by anonymous zeroed memory at the same addresses and the entry marked damaged; true
 * when that was done and the faulting access can resume.
 */
static bool rescue_shared(const uint8_t *address) {
  int saved = errno;
  bool rescued = false;
  int count = __atomic_load_n(&slab_count, __ATOMIC_ACQUIRE);
  for (int i = 0; i < count; i++) {
    slab_t *s = &slab_table[i];
    if (__atomic_load_n(&s->kind, __ATOMIC_ACQUIRE) != ENTRY_SHARED) continue;
    uint8_t *base = __atomic_load_n(&s->base, __ATOMIC_RELAXED);
    size_t length = __atomic_load_n(&s->length, __ATOMIC_RELAXED);
    if (address < base || address >= base + length) continue;
    if (mmap(base, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED) {
      __atomic_store_n(&s->damaged, 1, __ATOMIC_RELEASE);
      rescued = true;
    }
    break;
  }
  errno = saved;
  return rescued;
}

static void on_sigbus(int sig, siginfo_t *info, void *context) {
  if (info != NULL && rescue_shared((const uint8_t *)info->si_addr)) return;
  sigjmp_buf *jump = guard_jump;
  if (jump != NULL) {
    guard_jump = NULL;
    siglongjmp(*jump, 1);
  }
  /* Not a guarded copy: what would have happened without this module. */
  if (previous_bus.sa_flags & SA_SIGINFO) {
    if (previous_bus.sa_sigaction != NULL) {
      previous_bus.sa_sigaction(sig, info, context);
      return;
    }
  } else if (previous_bus.sa_handler != SIG_DFL && previous_bus.sa_handler != SIG_IGN) {
    previous_bus.sa_handler(sig);
    return;
  }
  /* Default action: restore it; the faulting instruction runs again and the process ends. */
  sigaction(SIGBUS, &previous_bus, NULL);
}

static void install_handler(void) {
  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_sigaction = on_sigbus;
  action.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&action.sa_mask);
  if (sigaction(SIGBUS, &action, &previous_bus) != 0) install_error = errno;
}

/*
 * memcpy that returns -1 instead of dying when a page of either side is gone. The signal mask is
 * not saved (sigsetjmp's second argument 0; saving it costs a system call per copy): the handler
 * runs with SA_NODEFER and an empty sa_mask, so entering it leaves the thread's mask unchanged
 * and jumping out of it needs nothing restored.
 */
static int guarded_copy(void *dst, const void *src, size_t n) {
  sigjmp_buf jump;
  if (sigsetjmp(jump, 0) != 0) return -1;
  guard_jump = &jump;
  memcpy(dst, src, n);
  guard_jump = NULL;
  return 0;
}

#define CHECK(call)                                                     \
  do {                                                                  \
    if ((call) != napi_ok) {                                            \
      napi_throw_error(env, NULL, "nereid native: Node-API call failed: " #call); \
      return NULL;                                                      \
    }                                                                   \
  } while (0)

static void finalize_mapping(napi_env env, void *data, void *hint) {
  (void)env;
  (void)hint;
  mapping_t *m = data;
  if (m->base != NULL) munmap(m->base, m->length);
  free(m);
}

static int get_mapping(napi_env env, napi_value value, mapping_t **out) {
  void *data = NULL;
  if (napi_get_value_external(env, value, &data) != napi_ok || data == NULL) {
    napi_throw_type_error(env, NULL, "nereid native: not a mapping");
    return -1;
  }
  *out = data;
  if ((*out)->base == NULL) {
    napi_throw_error(env, "ERR_SHM_UNMAPPED", "nereid native: the mapping was closed");
    return -1;
  }
  return 0;
}

static int get_bytes(napi_env env, napi_value value, uint8_t **data, size_t *length) {
  bool is_typed = false;
  napi_is_typedarray(env, value, &is_typed);
  if (!is_typed) {
    napi_throw_type_error(env, NULL, "nereid native: expected a Uint8Array");
    return -1;
  }
  napi_typedarray_type type;
  size_t count = 0;
  void *raw = NULL;
  if (napi_get_typedarray_info(env, value, &type, &count, &raw, NULL, NULL) != napi_ok || type != napi_uint8_array) {
    napi_throw_type_error(env, NULL, "nereid native: expected a Uint8Array");
    return -1;
  }
  *data = raw;
  *length = count;
  return 0;
}

static int get_position(napi_env env, napi_value value, size_t *out) {
  int64_t position = -1;
  if (napi_get_value_int64(env, value, &position) != napi_ok || position < 0) {
    napi_throw_range_error(env, NULL, "nereid native: position must be a non-negative integer");
    return -1;
  }
  *out = (size_t)position;
  return 0;
}

/* map(fd, length, writable) -> mapping of bytes [0, length) of the file. */
static napi_value map_file(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  int32_t fd = -1;
  int64_t length = 0;
  bool writable = false;
  if (argc < 3 || napi_get_value_int32(env, argv[0], &fd) != napi_ok || napi_get_value_int64(env, argv[1], &length) != napi_ok ||
      napi_get_value_bool(env, argv[2], &writable) != napi_ok || fd < 0 || length <= 0) {
    napi_throw_type_error(env, NULL, "nereid native: map(fd, length > 0, writable)");
    return NULL;
  }
  if (install_error != 0) {
    napi_throw_error(env, NULL, "nereid native: cannot install the SIGBUS guard");
    return NULL;
  }
  void *base = mmap(NULL, (size_t)length, PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    char message[160];
    snprintf(message, sizeof message, "nereid native: mmap of %lld bytes failed: %s", (long long)length, strerror(errno));
    napi_throw_error(env, "ERR_SHM_MMAP", message);
    return NULL;
  }
  mapping_t *m = malloc(sizeof *m);
  if (m == NULL) {
    munmap(base, (size_t)length);
    napi_throw_error(env, NULL, "nereid native: out of memory");
    return NULL;
  }
  m->base = base;
  m->length = (size_t)length;
  napi_value result;
  if (napi_create_external(env, m, finalize_mapping, NULL, &result) != napi_ok) {
    munmap(base, (size_t)length);
    free(m);
    napi_throw_error(env, NULL, "nereid native: cannot wrap the mapping");
    return NULL;
  }
  return result;
}

/* unmap(mapping): releases the mapping now (later calls on it throw). */
static napi_value unmap_file(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  void *data = NULL;
  if (argc < 1 || napi_get_value_external(env, argv[0], &data) != napi_ok || data == NULL) {
    napi_throw_type_error(env, NULL, "nereid native: not a mapping");
    return NULL;
  }
  mapping_t *m = data;
  if (m->base != NULL) {
    munmap(m->base, m->length);
    m->base = NULL;
  }
  return NULL;
}

/*
 * copy(mapping, position, bytes, intoMapping) -> true, or false when the file no longer holds the
 * bytes (SIGBUS caught). Copies bytes.length bytes between bytes and [position, position + n) of
 * the mapping: into the mapping when intoMapping, out of it otherwise.
 */
static napi_value copy_bytes(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (argc < 4) {
    napi_throw_type_error(env, NULL, "nereid native: copy(mapping, position, bytes, intoMapping)");
    return NULL;
  }
  mapping_t *m;
  size_t position;
  uint8_t *bytes;
  size_t length;
  bool into = false;
  if (get_mapping(env, argv[0], &m) != 0 || get_position(env, argv[1], &position) != 0 || get_bytes(env, argv[2], &bytes, &length) != 0) return NULL;
  CHECK(napi_get_value_bool(env, argv[3], &into));
  if (position > m->length || length > m->length - position) {
    napi_throw_range_error(env, "ERR_SHM_RANGE", "nereid native: copy outside the mapping");
    return NULL;
  }
  int status = length == 0 ? 0 : into ? guarded_copy(m->base + position, bytes, length) : guarded_copy(bytes, m->base + position, length);
  napi_value result;
  CHECK(napi_get_boolean(env, status == 0, &result));
  return result;
}

/* ---- slabs ---- */

/*
 * Maps `length` bytes (a multiple of HUGE_PAGE when at least that large, aligned to it, and
 * advised as huge pages: a 16 MiB tensor then costs 8 page faults instead of 4096).
 */
static uint8_t *slab_map(size_t length) {
  if (length < HUGE_PAGE) {
    void *p = mmap(NULL, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
  }
  size_t span = length + HUGE_PAGE;
  uint8_t *raw = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return NULL;
  uint8_t *aligned = (uint8_t *)(((uintptr_t)raw + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
  if (aligned > raw) munmap(raw, (size_t)(aligned - raw));
  size_t tail = (size_t)(raw + span - (aligned + length));
  if (tail > 0) munmap(aligned + length, tail);
#ifdef MADV_HUGEPAGE
  madvise(aligned, length, MADV_HUGEPAGE);
#endif
  return aligned;
}

/*
 * slabTake(bytes) -> id of a slab of at least `bytes` bytes (contents undefined), now the
 * caller's; -1 when none can be had (the address-space budget or the table is used up). A free
 * slab is reused when it is at most twice as large as asked.
 */
static napi_value slab_take(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  int64_t wanted = 0;
  if (argc < 1 || napi_get_value_int64(env, argv[0], &wanted) != napi_ok || wanted <= 0) {
    napi_throw_type_error(env, NULL, "nereid native: slabTake(bytes > 0)");
    return NULL;
  }
  size_t bytes = (size_t)wanted;
  int id = -1;
  pthread_mutex_lock(&slab_lock);
  for (int i = 0; i < slab_count; i++) {
    slab_t *s = &slab_table[i];
    if (s->kind != ENTRY_SLAB || !s->free || s->length < bytes || s->length / 2 > bytes) continue;
    if (id < 0 || s->length < slab_table[id].length) id = i;
  }
  if (id >= 0) {
    slab_t *s = &slab_table[id];
    s->free = false;
    if (s->resident) slab_idle_resident -= s->length;
  } else if (slab_count < SLAB_LIMIT) {
    size_t length = bytes < HUGE_PAGE ? (bytes + 4095) & ~(size_t)4095 : (bytes + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    if (slab_mapped + length <= SLAB_MAX_BYTES) {
      uint8_t *base = slab_map(length);
      if (base != NULL) {
        id = slab_count;
        slab_table[id] = (slab_t){base, length, false, true, ENTRY_SLAB, 0, 0};
        __atomic_store_n(&slab_count, slab_count + 1, __ATOMIC_RELEASE);
        slab_mapped += length;
      }
    }
  }
  pthread_mutex_unlock(&slab_lock);
  napi_value result;
  CHECK(napi_create_int32(env, id, &result));
  return result;
}

/*
 * The one argument of a slab function: the id of a live entry (a slab taken before, or a shared
 * mapping not yet unmapped), as its index in the table; a range error otherwise. `kinds`: the
 * entry kinds accepted (bit 1 << kind).
 */
static int slab_argument(napi_env env, napi_callback_info info, int kinds, int32_t *slot) {
  size_t argc = 1;
  napi_value value;
  int32_t id = -1;
  if (napi_get_cb_info(env, info, &argc, &value, NULL, NULL) != napi_ok || argc < 1 ||
      napi_get_value_int32(env, value, &id) != napi_ok || id < 0) {
    napi_throw_range_error(env, NULL, "nereid native: not a slab id");
    return -1;
  }
  *slot = id & ID_SLOT_MASK;
  pthread_mutex_lock(&slab_lock);
  bool known = *slot < slab_count && slab_table[*slot].generation == (id >> ID_SLOT_BITS) && (kinds & (1 << slab_table[*slot].kind)) != 0;
  pthread_mutex_unlock(&slab_lock);
  if (!known) {
    napi_throw_range_error(env, NULL, "nereid native: not a slab id");
    return -1;
  }
  return 0;
}

/*
 * slabView(id) -> an ArrayBuffer over the whole slab, for this thread. Views never free the
 * memory (slabs stay mapped), so a view outliving its use reads stale bytes, never freed memory.
 */
static napi_value slab_view(napi_env env, napi_callback_info info) {
  int32_t id;
  if (slab_argument(env, info, (1 << ENTRY_SLAB) | (1 << ENTRY_SHARED), &id) != 0) return NULL;
  pthread_mutex_lock(&slab_lock);
  slab_t s = slab_table[id];
  pthread_mutex_unlock(&slab_lock);
  napi_value result;
  CHECK(napi_create_external_arraybuffer(env, s.base, s.length, NULL, NULL, &result));
  return result;
}

/* slabGive(id): the slab is free again (taking it twice without a give in between is the caller's bug). */
static napi_value slab_give(napi_env env, napi_callback_info info) {
  int32_t id;
  if (slab_argument(env, info, 1 << ENTRY_SLAB, &id) != 0) return NULL;
  pthread_mutex_lock(&slab_lock);
  slab_t *s = &slab_table[id];
  if (!s->free) {
    s->free = true;
    if (slab_idle_resident + s->length > SLAB_IDLE_RESIDENT_BYTES) {
      /* Pages given back; the next use faults fresh zeroed ones in. */
      madvise(s->base, s->length, MADV_DONTNEED);
      s->resident = false;
    } else {
      s->resident = true;
      slab_idle_resident += s->length;
    }
  }
  pthread_mutex_unlock(&slab_lock);
  return NULL;
}

/* ---- shared mappings ---- */

/*
 * shareMap(fd, length) -> id of a new entry viewing bytes [0, length) of the file (read and
 * write, MAP_SHARED); `slabView(id)` views it in any thread until `shareUnmap(id)`.
 */
static napi_value share_map(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  int32_t fd = -1;
  int64_t length = 0;
  if (argc < 2 || napi_get_value_int32(env, argv[0], &fd) != napi_ok || napi_get_value_int64(env, argv[1], &length) != napi_ok || fd < 0 || length <= 0) {
    napi_throw_type_error(env, NULL, "nereid native: shareMap(fd, length > 0)");
    return NULL;
  }
  if (install_error != 0) {
    napi_throw_error(env, NULL, "nereid native: cannot install the SIGBUS handler");
    return NULL;
  }
  void *base = mmap(NULL, (size_t)length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    char message[160];
    snprintf(message, sizeof message, "nereid native: mmap of %lld bytes failed: %s", (long long)length, strerror(errno));
    napi_throw_error(env, "ERR_SHM_MMAP", message);
    return NULL;
  }
  int slot = -1;
  pthread_mutex_lock(&slab_lock);
  for (int i = 0; i < slab_count && slot < 0; i++) {
    if (slab_table[i].kind == ENTRY_DEAD) slot = i;
  }
  if (slot < 0 && slab_count < SLAB_LIMIT) slot = slab_count;
  int32_t id = -1;
  if (slot >= 0) {
    slab_t *s = &slab_table[slot];
    int generation = slot < slab_count ? s->generation + 1 : 1;
    if (generation > ID_MAX_GENERATION) generation = 1;
    s->base = base;
    s->length = (size_t)length;
    s->free = false;
    s->resident = true;
    s->generation = generation;
    __atomic_store_n(&s->damaged, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&s->kind, ENTRY_SHARED, __ATOMIC_RELEASE);
    if (slot == slab_count) __atomic_store_n(&slab_count, slab_count + 1, __ATOMIC_RELEASE);
    id = (generation << ID_SLOT_BITS) | slot;
  }
  pthread_mutex_unlock(&slab_lock);
  if (id < 0) {
    munmap(base, (size_t)length);
    napi_throw_error(env, "ERR_SHM_MMAP", "nereid native: too many mappings and slabs");
    return NULL;
  }
  napi_value result;
  CHECK(napi_create_int32(env, id, &result));
  return result;
}

/* shareDamaged(id) -> whether the object shrank under the mapping (see the top of this file). */
static napi_value share_damaged(napi_env env, napi_callback_info info) {
  int32_t slot;
  if (slab_argument(env, info, 1 << ENTRY_SHARED, &slot) != 0) return NULL;
  napi_value result;
  CHECK(napi_get_boolean(env, __atomic_load_n(&slab_table[slot].damaged, __ATOMIC_ACQUIRE) != 0, &result));
  return result;
}

/*
 * shareUnmap(id): releases the mapping. Views of it must no longer be used (the caller's
 * guarantee); the id is refused from now on.
 */
static napi_value share_unmap(napi_env env, napi_callback_info info) {
  int32_t slot;
  if (slab_argument(env, info, 1 << ENTRY_SHARED, &slot) != 0) return NULL;
  pthread_mutex_lock(&slab_lock);
  slab_t *s = &slab_table[slot];
  __atomic_store_n(&s->kind, ENTRY_DEAD, __ATOMIC_RELEASE);
  munmap(s->base, s->length);
  s->base = NULL;
  s->length = 0;
  pthread_mutex_unlock(&slab_lock);
  return NULL;
}

/* yieldCpu(): sched_yield(2), letting another runnable thread of this CPU run first. */
static napi_value yield_cpu(napi_env env, napi_callback_info info) {
  (void)env;
  (void)info;
  sched_yield();
  return NULL;
}

/* Direct ONNX Runtime sessions (ort.c). */
int nereid_ort_define(napi_env env, napi_value exports);

NAPI_MODULE_INIT() {
  pthread_once(&install_once, install_handler);
  napi_property_descriptor properties[] = {
      {"map", NULL, map_file, NULL, NULL, NULL, napi_default, NULL},
      {"unmap", NULL, unmap_file, NULL, NULL, NULL, napi_default, NULL},
      {"copy", NULL, copy_bytes, NULL, NULL, NULL, napi_default, NULL},
      {"slabTake", NULL, slab_take, NULL, NULL, NULL, napi_default, NULL},
      {"slabView", NULL, slab_view, NULL, NULL, NULL, napi_default, NULL},
      {"slabGive", NULL, slab_give, NULL, NULL, NULL, napi_default, NULL},
      {"shareMap", NULL, share_map, NULL, NULL, NULL, napi_default, NULL},
      {"shareDamaged", NULL, share_damaged, NULL, NULL, NULL, napi_default, NULL},
      {"shareUnmap", NULL, share_unmap, NULL, NULL, NULL, napi_default, NULL},
      {"yieldCpu", NULL, yield_cpu, NULL, NULL, NULL, napi_default, NULL},
  };
  if (napi_define_properties(env, exports, sizeof properties / sizeof properties[0], properties) != napi_ok) return NULL;
  if (nereid_ort_define(env, exports) != 0) return NULL;
  return exports;
}
