/* Tests of the world of one process that no launcher started (lib/comm's
 * solo.c): no MPI underneath, every collective the identity, sends to itself
 * matched with receives in posting order, MPI's truncation error kept. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"

static comm *world;

static void ok(int rc, const titan_err *e)
{
	if (rc != 0)
		fail_msg("%s", e->msg);
}

static void alone_the_world_is_one_rank_without_mpi(void **state)
{
	(void)state;
	int inited = 1;
	MPI_Initialized(&inited);
	assert_int_equal(inited, 0);
	assert_int_equal(comm_rank(world), 0);
	assert_int_equal(comm_size(world), 1);
	assert_int_equal(comm_local_size(world), 1);
	assert_true(comm_claim_report(world));
}

/* bfloat16 reductions are the identity bit for bit: negative zero, a NaN's
 * payload and a subnormal come back as they went. */
static void reductions_of_one_rank_return_the_input_bits(void **state)
{
	(void)state;
	titan_err e;
	uint16_t in[4] = {0x8000, 0x7fc1, 0x0001, 0x3f80}, out[4] = {0};
	ok(comm_all_reduce(world, in, out, 4, COMM_BF16, COMM_SUM, &e), &e);
	assert_memory_equal(in, out, sizeof in);
	memset(out, 0, sizeof out);
	ok(comm_reduce_scatter(world, in, out, 4, COMM_BF16, COMM_MAX, &e), &e);
	assert_memory_equal(in, out, sizeof in);
	double d[3] = {1.5, -0.0, NAN}, dout[3];
	ok(comm_all_gather(world, d, dout, 3, COMM_F64, &e), &e);
	assert_memory_equal(d, dout, sizeof d);
	ok(comm_all_reduce(world, d, d, 3, COMM_F64, COMM_SUM, &e), &e); /* in place */
	assert_memory_equal(d, dout, sizeof d);
}

/* MPI matches a source's messages with receives in the order both were
 * posted; a send may be waited for before its receive exists (buffered). */
static void sends_to_itself_meet_receives_in_posting_order(void **state)
{
	(void)state;
	titan_err e;
	int32_t a[3] = {1, 2, 3}, b[2] = {7, 8}, ra[3] = {0}, rb[2] = {0};
	ok(comm_send(world, a, 3, COMM_I32, 0, &e), &e);
	comm_req *s;
	ok(comm_send_start(world, b, 2, COMM_I32, 0, &s, &e), &e);
	b[0] = -1; /* the message was taken when the send started */
	ok(comm_recv(world, ra, 3, COMM_I32, 0, &e), &e);
	ok(comm_recv(world, rb, 2, COMM_I32, 0, &e), &e);
	ok(comm_wait(s, &e), &e);
	assert_memory_equal(ra, ((int32_t[]){1, 2, 3}), sizeof ra);
	assert_memory_equal(rb, ((int32_t[]){7, 8}), sizeof rb);

	comm_req *r;
	int32_t late[2] = {0};
	ok(comm_recv_start(world, late, 2, COMM_I32, 0, &r, &e), &e);
	int32_t c[2] = {5, 6};
	ok(comm_send(world, c, 2, COMM_I32, 0, &e), &e);
	ok(comm_wait(r, &e), &e);
	assert_memory_equal(late, c, sizeof c);
}

static void a_receive_smaller_than_its_message_fails_with_both_sizes(void **state)
{
	(void)state;
	titan_err e;
	int64_t big[4] = {1, 2, 3, 4}, small[2] = {0};
	comm *sub;
	ok(comm_split(world, 0, 0, "sub", &sub, &e), &e);
	ok(comm_send(sub, big, 4, COMM_I64, 0, &e), &e);
	assert_int_equal(comm_recv(sub, small, 2, COMM_I64, 0, &e), -1);
	assert_non_null(strstr(e.msg, "32 bytes"));
	assert_non_null(strstr(e.msg, "16"));
	comm_free(sub);
}

static void all_to_allv_copies_its_one_block(void **state)
{
	(void)state;
	titan_err e;
	float in[5] = {0, 1, 2, 3, 4}, out[6] = {9, 9, 9, 9, 9, 9};
	size_t sc = 3, sd = 2, rc = 4, rd = 1;
	ok(comm_all_to_allv(world, in, &sc, &sd, out, &rc, &rd, COMM_F32, &e), &e);
	assert_memory_equal(out, ((float[]){9, 2, 3, 4, 9, 9}), sizeof out);
	rc = 2;
	comm *sub;
	ok(comm_split(world, 3, 1, "sub", &sub, &e), &e);
	assert_int_equal(comm_size(sub), 1);
	assert_int_equal(comm_all_to_allv(sub, in, &sc, &sd, out, &rc, &rd, COMM_F32, &e), -1);
	comm_free(sub);
}

int main(void)
{
	titan_err e;
	if (comm_init(NULL, NULL, 60, &world, &e) != 0) {
		fprintf(stderr, "comm_init: %s\n", e.msg);
		return 1;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(alone_the_world_is_one_rank_without_mpi),
		cmocka_unit_test(reductions_of_one_rank_return_the_input_bits),
		cmocka_unit_test(sends_to_itself_meet_receives_in_posting_order),
		cmocka_unit_test(all_to_allv_copies_its_one_block),
		/* last: a failed operation ends the process's communication */
		cmocka_unit_test(a_receive_smaller_than_its_message_fails_with_both_sizes),
	};
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	comm_finalize(world);
	return rc;
}
