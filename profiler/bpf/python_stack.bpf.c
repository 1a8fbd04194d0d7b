/* Python's frames at each sample, read in the kernel while the thread is stopped there.
 *
 * Attached to hpcrun-rs's sampling events (PERF_EVENT_IOC_SET_BPF): at every sample of a
 * process that hpcrun-rs registered in `configs` (a CPython 3.11 or later), this program finds
 * the sampled thread's PyThreadState in the interpreter's list of threads (by its native thread
 * id), walks its chain of interpreter frames and writes, innermost first, each frame's code
 * object and instruction pointer to `stacks`, marking where one activation of the evaluator's C
 * function begins (a shim frame of code 0 from 3.12 on, bit 0 of the instruction pointer of
 * an activation's first frame in 3.11). hpcrun-rs matches the record to the sample by
 * thread and time, and resolves code objects to functions, files and lines afterwards. The
 * sample itself is always kept (the program returns 1).
 *
 * Built with `clang -target bpf` by profiler/build.rs; no headers beyond the kernel's UAPI. */
#include <linux/bpf.h>

typedef unsigned long long u64;
typedef unsigned int u32;

#define SECTION(name) __attribute__((section(name), used))

/* Helper functions, by their numbers in linux/bpf.h. */
static u64 (*get_current_pid_tgid)(void) = (void *)BPF_FUNC_get_current_pid_tgid;
static u64 (*ktime_get_ns)(void) = (void *)BPF_FUNC_ktime_get_ns;
static long (*probe_read_user)(void *dst, u32 size, const void *src) =
    (void *)BPF_FUNC_probe_read_user;
static void *(*map_lookup_elem)(void *map, const void *key) = (void *)BPF_FUNC_map_lookup_elem;
static long (*ringbuf_output)(void *ringbuf, void *data, u64 size, u64 flags) =
    (void *)BPF_FUNC_ringbuf_output;

/* A map definition in the legacy `maps` section layout. */
struct map_def {
  u32 type;
  u32 key_size;
  u32 value_size;
  u32 max_entries;
  u32 map_flags;
};

/* Where one process's interpreter keeps its threads and frames (written by hpcrun-rs; offsets
 * in bytes; NONE where a version has no such field). */
#define NONE 0xffffffffu
struct config {
  u64 interpreters_head; /* address of _PyRuntime.interpreters.head */
  u32 threads_head;      /* PyInterpreterState.threads.head */
  u32 thread_next;       /* PyThreadState.next */
  u32 thread_id;         /* PyThreadState.native_thread_id */
  u32 thread_frame;      /* PyThreadState.cframe (3.11, 3.12) or .current_frame (3.13) */
  u32 cframe_frame;      /* _PyCFrame.current_frame, or NONE */
  u32 frame_code;        /* _PyInterpreterFrame.f_code / f_executable */
  u32 frame_previous;    /* _PyInterpreterFrame.previous */
  u32 frame_instr;       /* _PyInterpreterFrame.prev_instr / instr_ptr */
  u32 frame_owner;       /* _PyInterpreterFrame.owner (a byte) */
  u32 frame_entry;       /* _PyInterpreterFrame.is_entry (3.11, a byte), or NONE */
  u32 code_qualname;     /* PyCodeObject.co_qualname */
  u32 code_first_line;   /* PyCodeObject.co_firstlineno */
};

#define MAX_THREADS 64
#define MAX_FRAMES 128
#define OWNED_BY_CSTACK 3

/* One frame: its code object, instruction pointer, and the code object's name pointer and
 * first line as they were at the sample (hpcrun-rs reads the code object later, and takes it
 * for the same only where these still match: code objects are freed and their memory reused). */
struct frame {
  u64 code;
  u64 instr;
  u64 name;
  u64 first_line;
};

struct record {
  u64 time;
  u32 pid;
  u32 tid;
  u32 frames;
  u32 truncated;
  struct frame frame[MAX_FRAMES];
};

struct map_def configs SECTION("maps") = {
    .type = BPF_MAP_TYPE_HASH,
    .key_size = sizeof(u32),
    .value_size = sizeof(struct config),
    .max_entries = 4096,
};

struct map_def scratch SECTION("maps") = {
    .type = BPF_MAP_TYPE_PERCPU_ARRAY,
    .key_size = sizeof(u32),
    .value_size = sizeof(struct record),
    .max_entries = 1,
};

struct map_def stacks SECTION("maps") = {
    .type = BPF_MAP_TYPE_RINGBUF,
    .max_entries = 1 << 24,
};

static u64 read_pointer(u64 address) {
  u64 value = 0;
  if (probe_read_user(&value, sizeof(value), (const void *)address) != 0)
    return 0;
  return value;
}

static unsigned char read_byte(u64 address) {
  unsigned char value = 0;
  probe_read_user(&value, sizeof(value), (const void *)address);
  return value;
}

/* The sampled thread's PyThreadState, or 0. */
static u64 thread_state(const struct config *c, u32 tid) {
  u64 interp = read_pointer(c->interpreters_head);
  if (interp == 0)
    return 0;
  u64 thread = read_pointer(interp + c->threads_head);
  for (int i = 0; i < MAX_THREADS && thread != 0; i++) {
    if (read_pointer(thread + c->thread_id) == tid)
      return thread;
    thread = read_pointer(thread + c->thread_next);
  }
  return 0;
}

SECTION("perf_event")
int python_stack(void *ctx) {
  u64 pid_tgid = get_current_pid_tgid();
  u32 pid = pid_tgid >> 32, tid = (u32)pid_tgid;
  const struct config *c = map_lookup_elem(&configs, &pid);
  if (c == 0)
    return 1;
  u32 zero = 0;
  struct record *r = map_lookup_elem(&scratch, &zero);
  if (r == 0)
    return 1;
  r->time = ktime_get_ns();
  r->pid = pid;
  r->tid = tid;
  r->frames = 0;
  r->truncated = 0;
  u64 thread = thread_state(c, tid);
  u64 frame = thread ? read_pointer(thread + c->thread_frame) : 0;
  if (frame != 0 && c->cframe_frame != NONE)
    frame = read_pointer(frame + c->cframe_frame);
  u32 n = 0;
  for (u32 i = 0; i < MAX_FRAMES && frame != 0; i++) {
    u64 code = read_pointer(frame + c->frame_code);
    u64 instr = read_pointer(frame + c->frame_instr);
    unsigned char owner = read_byte(frame + c->frame_owner);
    unsigned char entry = c->frame_entry != NONE ? read_byte(frame + c->frame_entry) : 0;
    /* A frame owned by the C stack is an activation's entry shim (3.12 on): code 0. In 3.11
     * the activation's first frame says so itself: bit 0 of its (even) instruction pointer. */
    if (owner == OWNED_BY_CSTACK)
      code = 0;
    struct frame *f = &r->frame[i & (MAX_FRAMES - 1)];
    f->code = code;
    f->instr = instr | (entry != 0);
    f->name = code ? read_pointer(code + c->code_qualname) : 0;
    f->first_line = 0;
    if (code)
      probe_read_user(&f->first_line, 4, (const void *)(code + c->code_first_line));
    n = i + 1;
    frame = read_pointer(frame + c->frame_previous);
  }
  r->frames = n;
  r->truncated = thread == 0 ? 2 : frame != 0;
  u64 size = sizeof(*r) - sizeof(r->frame) + (u64)(n & (2 * MAX_FRAMES - 1)) * sizeof(struct frame);
  if (size > sizeof(*r))
    size = sizeof(*r);
  ringbuf_output(&stacks, r, size, 0);
  return 1;
}

char LICENSE[] SECTION("license") = "Dual MIT/GPL";
