/* A stand-in for libibverbs and an mlx5-like provider, for testing the tracer's rdma engine on a machine
 * without an RDMA NIC. Built by tracer/tests/capture_rdma.rs against the installed <infiniband/verbs.h>, so
 * its structures are rdma-core's own, and loaded by the tracer through ROCETRACE_LIBIBVERBS.
 *
 * It offers one device, mlx5_0, and answers the calls the sniffer makes the way a provider does: the
 * extended operations sit in a struct verbs_context before the ibv_context handed out, the data path in
 * context->ops and in the extended CQ's function pointers. Once the sniffer flow rule exists, each poll of
 * the CQ completes one posted receive buffer with a RoCEv2 SEND ONLY frame (PSN = its number), stamped by a
 * fake NIC clock that counts nanoseconds (1 GHz) from an offset, in 48 bits: the first when it is polled,
 * each next one 1 us later (or by the same times in real-time format, or as wall-clock nanoseconds, as the
 * CQ asked).
 *
 * Environment:
 * - FAKEVERBS_FRAMES: how many frames (default 20);
 * - FAKEVERBS_OPEN_ERRNO, FAKEVERBS_QP_ERRNO, FAKEVERBS_MR_ERRNO, FAKEVERBS_FLOW_ERRNO: make
 *   ibv_open_device, ibv_create_qp, ibv_reg_mr or ibv_create_flow fail with that errno (freeing the device
 *   list always leaves errno at ENOTTY);
 * - FAKEVERBS_POLL_ERRNO and FAKEVERBS_POLL_AT: ibv_next_poll fails on that frame (see next_poll);
 * - FAKEVERBS_CLOCK: how the NIC's clock is set (see enum clock_mode);
 * - FAKEVERBS_OOB_FILE: a file that gets the value 5 once every frame is delivered, like the port's
 *   out_of_buffer counter;
 * - FAKEVERBS_LOG: a file each destroy call appends its name to, ibv_create_cq_ex the stamps it was asked
 *   for and ibv_create_qp the send queue. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#define CLOCK_MASK ((1ULL << 48) - 1)
#define CLOCK_OFFSET 123456789ULL
#define MAX_RECV 8192

static struct ibv_device fake_device;
static int frames_left = -1;
static int sniffing;

struct fake_qp {
	struct ibv_qp qp;
	uint64_t wr_id[MAX_RECV];
	uint64_t addr[MAX_RECV];
	uint32_t len[MAX_RECV];
	int head, count;
};

struct fake_cq {
	struct ibv_cq_ex cq;
	uint32_t byte_len;
	/* The completion's stamp as the NIC wrote it, and as ibv_wc_read_completion_wallclock_ns gives it. */
	uint64_t ts, wall_ns;
	int psn;
	/* Made with IBV_WC_EX_WITH_COMPLETION_TIMESTAMP. */
	int free_running;
};

static struct fake_qp *the_qp;

static void note(const char *what)
{
	const char *path = getenv("FAKEVERBS_LOG");
	if (!path)
		return;
	FILE *f = fopen(path, "a");
	if (f) {
		fprintf(f, "%s\n", what);
		fclose(f);
	}
}

static int env_int(const char *name, int dflt)
{
	const char *v = getenv(name);
	return v ? atoi(v) : dflt;
}

/* FAKEVERBS_CLOCK: how the NIC's clock is set. */
enum clock_mode {
	/* The default: free-running counter, which the provider can also turn into wall-clock time. */
	FREE_RUNNING,
	/* "real-time": the NIC stamps seconds:nanoseconds of wall time, and mlx5_ib refuses a QP whose CQ
	 * asks for the free-running counter (EOPNOTSUPP), while wall-clock stamps are served. */
	REAL_TIME,
	/* "none": no stamps at all; a CQ asking for any is refused (EOPNOTSUPP). */
	NO_STAMPS,
};

static enum clock_mode clock_mode(void)
{
	const char *v = getenv("FAKEVERBS_CLOCK");
	if (v && !strcmp(v, "real-time"))
		return REAL_TIME;
	if (v && !strcmp(v, "none"))
		return NO_STAMPS;
	return FREE_RUNNING;
}

static uint64_t wall_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	return (uint64_t)t.tv_sec * 1000000000ULL + t.tv_nsec;
}

static uint64_t nic_ticks(void)
{
	return (wall_now() + CLOCK_OFFSET) & CLOCK_MASK;
}

/* The next posted buffer gets a frame: Ethernet, IPv4 (ECT(0)), UDP to 4791, BTH SEND ONLY to QP 0x11,
 * 16 bytes of payload and an ICRC. */
static int complete_one(struct fake_cq *c)
{
	static const uint8_t head[] = {
		0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00,
		0x45, 0x02, 0, 60, 0, 1, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
		0xc0, 0x00, 0x12, 0xb7, 0, 40, 0, 0,
		0x04, 0x40, 0xff, 0xff, 0, 0, 0, 0x11, 0, 0, 0, 0,
	};
	if (frames_left < 0)
		frames_left = env_int("FAKEVERBS_FRAMES", 20);
	if (!sniffing || !the_qp || the_qp->count == 0)
		return ENOENT;
	if (frames_left == 0) {
		const char *oob = getenv("FAKEVERBS_OOB_FILE");
		if (oob) {
			FILE *f = fopen(oob, "w");
			if (f) {
				fputs("5\n", f);
				fclose(f);
			}
		}
		return ENOENT;
	}
	int i = the_qp->head;
	uint8_t *buf = (uint8_t *)(uintptr_t)the_qp->addr[i];
	uint32_t n = sizeof(head) + 16 + 4;
	if (the_qp->len[i] < n)
		return ENOENT;
	memcpy(buf, head, sizeof(head));
	buf[sizeof(head) - 1] = (uint8_t)c->psn;
	buf[sizeof(head) - 2] = (uint8_t)(c->psn >> 8);
	memset(buf + sizeof(head), 0xab, 20);
	c->cq.status = IBV_WC_SUCCESS;
	c->cq.wr_id = the_qp->wr_id[i];
	c->byte_len = n;
	/* The frames passed the port 1 us apart, starting when the first was polled. */
	static uint64_t first_wall;
	if (c->psn == 0)
		first_wall = wall_now();
	uint64_t wall = first_wall + (uint64_t)c->psn * 1000;
	if (clock_mode() == REAL_TIME) {
		/* mlx5 hands a real-time stamp on unconverted as the wall-clock reading too. */
		c->ts = ((wall / 1000000000ULL) << 32) | (wall % 1000000000ULL);
		c->wall_ns = c->ts;
	} else {
		c->ts = (wall + CLOCK_OFFSET) & CLOCK_MASK;
		c->wall_ns = wall;
	}
	c->psn++;
	the_qp->head = (i + 1) % MAX_RECV;
	the_qp->count--;
	frames_left--;
	return 0;
}

static int start_poll(struct ibv_cq_ex *cq, struct ibv_poll_cq_attr *attr)
{
	(void)attr;
	return complete_one((struct fake_cq *)cq);
}

/* FAKEVERBS_POLL_ERRNO at frame FAKEVERBS_POLL_AT: EBUSY once, with the completion left for the next poll
 * (what rdma-core documents for a clock update racing the poll); any other errno with the completion
 * consumed and lost, as a provider that cannot parse a CQE moves past it. */
static int next_poll(struct ibv_cq_ex *cq)
{
	struct fake_cq *c = (struct fake_cq *)cq;
	static int busy_given;
	int e = env_int("FAKEVERBS_POLL_ERRNO", 0);
	if (e && c->psn == env_int("FAKEVERBS_POLL_AT", 0) && frames_left > 0 && the_qp &&
	    the_qp->count > 0) {
		if (e == EBUSY) {
			if (!busy_given) {
				busy_given = 1;
				return EBUSY;
			}
		} else {
			the_qp->head = (the_qp->head + 1) % MAX_RECV;
			the_qp->count--;
			frames_left--;
			c->psn++;
			return e;
		}
	}
	return complete_one(c);
}

static void end_poll(struct ibv_cq_ex *cq)
{
	(void)cq;
}

static uint32_t read_byte_len(struct ibv_cq_ex *cq)
{
	return ((struct fake_cq *)cq)->byte_len;
}

static uint64_t read_completion_ts(struct ibv_cq_ex *cq)
{
	return ((struct fake_cq *)cq)->ts;
}

static uint64_t read_completion_wallclock_ns(struct ibv_cq_ex *cq)
{
	return ((struct fake_cq *)cq)->wall_ns;
}

static struct ibv_cq_ex *create_cq_ex(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *attr)
{
	int raw = !!(attr->wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP);
	int wall = !!(attr->wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK);
	char line[64];
	snprintf(line, sizeof(line), "create_cq timestamps=%s",
		 raw ? (wall ? "both" : "free-running") : (wall ? "wallclock" : "none"));
	note(line);
	if ((raw || wall) && clock_mode() == NO_STAMPS) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	struct fake_cq *c = calloc(1, sizeof(*c));
	c->cq.context = ctx;
	c->cq.channel = attr->channel;
	c->cq.start_poll = start_poll;
	c->cq.next_poll = next_poll;
	c->cq.end_poll = end_poll;
	c->cq.read_byte_len = read_byte_len;
	if (raw)
		c->cq.read_completion_ts = read_completion_ts;
	if (wall)
		c->cq.read_completion_wallclock_ns = read_completion_wallclock_ns;
	c->free_running = raw;
	return &c->cq;
}

static int req_notify_cq(struct ibv_cq *cq, int solicited)
{
	(void)solicited;
	/* Wake the waiter while frames remain, as a provider does when a completion arrives. */
	if (frames_left != 0 && cq->channel) {
		uint64_t one = 1;
		if (write(cq->channel->fd, &one, sizeof(one)) < 0)
			return errno;
	}
	return 0;
}

static int post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct fake_qp *q = (struct fake_qp *)qp;
	for (; wr; wr = wr->next) {
		if (q->count == MAX_RECV || wr->num_sge != 1) {
			*bad = wr;
			return ENOMEM;
		}
		int at = (q->head + q->count) % MAX_RECV;
		q->wr_id[at] = wr->wr_id;
		q->addr[at] = wr->sg_list[0].addr;
		q->len[at] = wr->sg_list[0].length;
		q->count++;
	}
	return 0;
}

static struct ibv_flow *create_flow(struct ibv_qp *qp, struct ibv_flow_attr *attr)
{
	int e = env_int("FAKEVERBS_FLOW_ERRNO", 0);
	if (e) {
		errno = e;
		return NULL;
	}
	if (attr->type != IBV_FLOW_ATTR_SNIFFER || attr->num_of_specs != 0 || attr->port != 1 ||
	    attr->size != sizeof(*attr) || qp->qp_type != IBV_QPT_RAW_PACKET) {
		errno = EINVAL;
		return NULL;
	}
	struct ibv_flow *f = calloc(1, sizeof(*f));
	f->context = qp->context;
	sniffing = 1;
	return f;
}

static int destroy_flow(struct ibv_flow *f)
{
	note("destroy_flow");
	sniffing = 0;
	free(f);
	return 0;
}

static int query_rt_values(struct ibv_context *ctx, struct ibv_values_ex *v)
{
	(void)ctx;
	v->raw_clock.tv_sec = 0;
	v->raw_clock.tv_nsec = (long)nic_ticks();
	return 0;
}

static int query_device_ex(struct ibv_context *ctx, const struct ibv_query_device_ex_input *in,
			   struct ibv_device_attr_ex *attr, size_t size)
{
	(void)ctx;
	(void)in;
	if (size < sizeof(*attr))
		return EINVAL;
	memset(attr, 0, sizeof(*attr));
	attr->hca_core_clock = 1000000;
	attr->completion_timestamp_mask = CLOCK_MASK;
	return 0;
}

struct ibv_device **ibv_get_device_list(int *n)
{
	struct ibv_device **list = calloc(2, sizeof(*list));
	strcpy(fake_device.name, "mlx5_0");
	list[0] = &fake_device;
	if (n)
		*n = 1;
	return list;
}

void ibv_free_device_list(struct ibv_device **list)
{
	free(list);
	/* The real one may leave errno changed (it frees and closes things); this one always does, so that a
	 * caller reading errno after it reads this. */
	errno = ENOTTY;
}

struct ibv_context *ibv_open_device(struct ibv_device *dev)
{
	int e = env_int("FAKEVERBS_OPEN_ERRNO", 0);
	if (e) {
		errno = e;
		return NULL;
	}
	struct verbs_context *v = calloc(1, sizeof(*v));
	v->sz = sizeof(*v);
	v->context.device = dev;
	v->context.abi_compat = __VERBS_ABI_IS_EXTENDED;
	v->context.ops.post_recv = post_recv;
	v->context.ops.req_notify_cq = req_notify_cq;
	v->create_cq_ex = create_cq_ex;
	v->ibv_create_flow = create_flow;
	v->ibv_destroy_flow = destroy_flow;
	v->query_rt_values = query_rt_values;
	v->query_device_ex = query_device_ex;
	return &v->context;
}

int ibv_close_device(struct ibv_context *ctx)
{
	note("close_device");
	free((uint8_t *)ctx - offsetof(struct verbs_context, context));
	return 0;
}

int ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *attr)
{
	(void)ctx;
	memset(attr, 0, sizeof(*attr));
	return 0;
}

struct ibv_pd *ibv_alloc_pd(struct ibv_context *ctx)
{
	struct ibv_pd *pd = calloc(1, sizeof(*pd));
	pd->context = ctx;
	return pd;
}

int ibv_dealloc_pd(struct ibv_pd *pd)
{
	note("dealloc_pd");
	free(pd);
	return 0;
}

struct ibv_mr *(ibv_reg_mr)(struct ibv_pd *pd, void *addr, size_t len, int access)
{
	int e = env_int("FAKEVERBS_MR_ERRNO", 0);
	if (e) {
		errno = e;
		return NULL;
	}
	if (!(access & IBV_ACCESS_LOCAL_WRITE)) {
		errno = EINVAL;
		return NULL;
	}
	struct ibv_mr *mr = calloc(1, sizeof(*mr));
	mr->pd = pd;
	mr->addr = addr;
	mr->length = len;
	mr->lkey = 42;
	return mr;
}

int ibv_dereg_mr(struct ibv_mr *mr)
{
	note("dereg_mr");
	free(mr);
	return 0;
}

struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *ctx)
{
	struct ibv_comp_channel *ch = calloc(1, sizeof(*ch));
	ch->context = ctx;
	ch->fd = eventfd(0, 0);
	return ch;
}

int ibv_destroy_comp_channel(struct ibv_comp_channel *ch)
{
	note("destroy_comp_channel");
	close(ch->fd);
	free(ch);
	return 0;
}

int ibv_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **ctx)
{
	uint64_t v;
	if (read(ch->fd, &v, sizeof(v)) != sizeof(v))
		return -1;
	*cq = NULL;
	*ctx = NULL;
	return 0;
}

void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int n)
{
	(void)cq;
	(void)n;
}

int ibv_destroy_cq(struct ibv_cq *cq)
{
	note("destroy_cq");
	free(cq);
	return 0;
}

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	int e = env_int("FAKEVERBS_QP_ERRNO", 0);
	if (e) {
		errno = e;
		return NULL;
	}
	char line[80];
	snprintf(line, sizeof(line), "create_qp max_send_wr=%u max_send_sge=%u", attr->cap.max_send_wr,
		 attr->cap.max_send_sge);
	note(line);
	if (attr->qp_type != IBV_QPT_RAW_PACKET || attr->cap.max_recv_wr > MAX_RECV) {
		errno = EINVAL;
		return NULL;
	}
	/* What mlx5_ib checks: a CQ asking for the raw counter gives the receive queue free-running
	 * timestamps, which a NIC set to real-time timestamps cannot give. */
	if (clock_mode() == REAL_TIME && ((struct fake_cq *)attr->recv_cq)->free_running) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	struct fake_qp *q = calloc(1, sizeof(*q));
	q->qp.context = pd->context;
	q->qp.pd = pd;
	q->qp.qp_type = attr->qp_type;
	q->qp.state = IBV_QPS_RESET;
	the_qp = q;
	return &q->qp;
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	if (!(mask & IBV_QP_STATE))
		return EINVAL;
	if (attr->qp_state == IBV_QPS_INIT && (!(mask & IBV_QP_PORT) || attr->port_num != 1))
		return EINVAL;
	qp->state = attr->qp_state;
	return 0;
}

int ibv_destroy_qp(struct ibv_qp *qp)
{
	note("destroy_qp");
	the_qp = NULL;
	free(qp);
	return 0;
}
