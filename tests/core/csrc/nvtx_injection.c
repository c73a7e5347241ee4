/* A minimal NVTX tool, as Nsight Systems attaches one: an injection library named by
 * NVTX_INJECTION64_PATH, whose InitializeInjectionNvtx2 the NVTX loader of the profiled
 * program calls with its export table (NVTX_ETID_CALLBACKS); the tool fills the function
 * slots it implements (NVTX_CB_MODULE_CORE2: domain create, register string, name
 * category, range push/pop, mark; NVTX_CB_MODULE_CORE: the global range push/pop) and
 * returns 1. It logs what it receives, one tab-separated line each, to the file named by
 * HS_NVTX_LOG:
 *
 *   domain <domain> <name>
 *   category <domain> <id> <name>
 *   push <tid> <domain> <category> <payload or -> <message>
 *   pop <tid> <domain>
 *   mark <tid> <domain> <category> <payload or -> <message>
 *
 * <domain> is the domain's name ("-" for NVTX's global domain), <tid> the OS thread id.
 */
#define _GNU_SOURCE
#define NVTX_NO_IMPL /* a tool: the types only, not the loader */
#include "nvtx3/nvToolsExt.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef struct { char *name; } domain_t;
typedef struct { char *text; } string_t;

static int log_fd = -1;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

static void logf_(const char *fmt, ...) {
    char buf[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (n > (int)sizeof(buf) - 2) n = (int)sizeof(buf) - 2;
    buf[n++] = '\n';
    pthread_mutex_lock(&log_lock);
    if (log_fd >= 0 && write(log_fd, buf, (size_t)n) != n) abort();
    pthread_mutex_unlock(&log_lock);
}

static long tid(void) { return (long)syscall(SYS_gettid); }
static const char *dname(nvtxDomainHandle_t d) { return d ? ((domain_t *)d)->name : "-"; }

static const char *message(const nvtxEventAttributes_t *a) {
    switch (a->messageType) {
    case NVTX_MESSAGE_TYPE_ASCII: return a->message.ascii;
    case NVTX_MESSAGE_TYPE_REGISTERED: return a->message.registered ? ((string_t *)a->message.registered)->text : "?";
    default: return "";
    }
}

static void payload(const nvtxEventAttributes_t *a, char *out, size_t n) {
    if (a->payloadType == NVTX_PAYLOAD_TYPE_INT64) snprintf(out, n, "%lld", (long long)a->payload.llValue);
    else snprintf(out, n, "-");
}

static nvtxDomainHandle_t NVTX_API domain_create(const char *name) {
    domain_t *d = malloc(sizeof(domain_t));
    d->name = strdup(name);
    logf_("domain\t%s", name);
    return (nvtxDomainHandle_t)d;
}

static nvtxStringHandle_t NVTX_API register_string(nvtxDomainHandle_t d, const char *text) {
    (void)d;
    string_t *s = malloc(sizeof(string_t));
    s->text = strdup(text);
    return (nvtxStringHandle_t)s;
}

static void NVTX_API name_category(nvtxDomainHandle_t d, uint32_t id, const char *name) {
    logf_("category\t%s\t%u\t%s", dname(d), id, name);
}

static int NVTX_API domain_push(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a) {
    char p[32];
    payload(a, p, sizeof(p));
    logf_("push\t%ld\t%s\t%u\t%s\t%s", tid(), dname(d), a->category, p, message(a));
    return 0;
}

static int NVTX_API domain_pop(nvtxDomainHandle_t d) {
    logf_("pop\t%ld\t%s", tid(), dname(d));
    return 0;
}

static void NVTX_API domain_mark(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a) {
    char p[32];
    payload(a, p, sizeof(p));
    logf_("mark\t%ld\t%s\t%u\t%s\t%s", tid(), dname(d), a->category, p, message(a));
}

static int NVTX_API push_a(const char *msg) {
    logf_("push\t%ld\t-\t0\t-\t%s", tid(), msg);
    return 0;
}
static int NVTX_API push_ex(const nvtxEventAttributes_t *a) { return domain_push(NULL, a); }
static int NVTX_API pop(void) { return domain_pop(NULL); }

#define SLOT(table, id, fn) (*(table)[id] = (NvtxFunctionPointer)(fn))

__attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table) {
    const char *path = getenv("HS_NVTX_LOG");
    if (!path) return 0;
    log_fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (log_fd < 0) return 0;
    const NvtxExportTableCallbacks *cb = (const NvtxExportTableCallbacks *)get_table(NVTX_ETID_CALLBACKS);
    if (!cb || cb->struct_size < sizeof(NvtxExportTableCallbacks)) return 0;
    NvtxFunctionTable core2 = NULL, core = NULL;
    unsigned int n2 = 0, n1 = 0;
    if (!cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &core2, &n2) || !core2) return 0;
    if (!cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &core, &n1) || !core) return 0;
    if (n2 <= NVTX_CBID_CORE2_DomainCreateA || n1 <= NVTX_CBID_CORE_RangePop) return 0;
    SLOT(core2, NVTX_CBID_CORE2_DomainCreateA, domain_create);
    SLOT(core2, NVTX_CBID_CORE2_DomainRegisterStringA, register_string);
    SLOT(core2, NVTX_CBID_CORE2_DomainNameCategoryA, name_category);
    SLOT(core2, NVTX_CBID_CORE2_DomainRangePushEx, domain_push);
    SLOT(core2, NVTX_CBID_CORE2_DomainRangePop, domain_pop);
    SLOT(core2, NVTX_CBID_CORE2_DomainMarkEx, domain_mark);
    SLOT(core, NVTX_CBID_CORE_RangePushA, push_a);
    SLOT(core, NVTX_CBID_CORE_RangePushEx, push_ex);
    SLOT(core, NVTX_CBID_CORE_RangePop, pop);
    logf_("init");
    return 1;
}
