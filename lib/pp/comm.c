/* The engine's transport over lib/comm (the mesh's pp communicator), and the
 * check that every pipeline rank runs the same schedule. */
#include <stdlib.h>

#include "comm/comm.h"
#include "pp/pp.h"

static int csend(void *ctx, int peer, const void *buf, size_t n, void **req, titan_err *e)
{
	return comm_send_start(ctx, buf, n, COMM_U8, peer, (comm_req **)req, e);
}

static int crecv(void *ctx, int peer, void *buf, size_t n, void **req, titan_err *e)
{
	return comm_recv_start(ctx, buf, n, COMM_U8, peer, (comm_req **)req, e);
}

/* lib/comm finishes a request only by waiting for it: a test reports it
 * open, so the engine keeps its sends until the step ends. */
static int cwait(void *ctx, void *req, int block, int *done, titan_err *e)
{
	(void)ctx;
	*done = block;
	return block ? comm_wait(req, e) : 0;
}

void pp_transport_comm(comm *pp, pp_transport *out)
{
	*out = (pp_transport){.ctx = pp, .send = csend, .recv = crecv, .wait = cwait};
}

int pp_schedule_agree(comm *pp, const pp_schedule *s, titan_err *e)
{
	int n = comm_size(pp);
	uint32_t mine = pp_schedule_crc(s), *all = malloc((size_t)n * sizeof *all);
	if (all == NULL)
		return err_set(e, "pipeline schedule check: out of memory");
	int rc = comm_all_gather(pp, &mine, all, 1, COMM_I32, e);
	for (int r = 0; rc == 0 && r < n; r++)
		if (all[r] != all[0])
			rc = err_set(e, "the pipeline ranks built different schedules: rank 0's checksum "
				     "is %08x, rank %d's %08x (same config and CSV on every rank?)",
				     all[0], r, all[r]);
	free(all);
	return rc;
}
