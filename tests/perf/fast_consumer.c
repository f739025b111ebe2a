/*
 * A consumer that costs as little as librdkafka allows, for the data-plane benchmark
 * (issue 22: consumption measured with a client that is not the bottleneck).
 *
 * Reads every partition of one topic from its log start to its end (the high watermark
 * when the partition is reached: `enable.partition.eof`) with librdkafka's consumer, no
 * group (assign, not subscribe), in batches of up to 4,096 messages, and touches nothing
 * but the lengths. Prints one JSON line:
 *
 *   {"messages": N, "value_bytes": B, "first_s": T0, "last_s": T1, "errors": E, ...}
 *
 * first_s / last_s: CLOCK_MONOTONIC seconds of the first batch's arrival and of the last
 * partition's end; value_bytes counts the batches after the first, so B / (T1 - T0) leaves
 * the start (metadata, offsets, the first fetch) out.
 *
 *   gcc -O2 -o fast_consumer fast_consumer.c -lrdkafka   (Debian: librdkafka-dev)
 *   fast_consumer BOOTSTRAP TOPIC [key=value librdkafka settings...]
 */
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BATCH 4096

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int set(rd_kafka_conf_t *conf, const char *name, const char *value) {
    char err[512];
    if (rd_kafka_conf_set(conf, name, value, err, sizeof err) != RD_KAFKA_CONF_OK) {
        fprintf(stderr, "fast_consumer: %s=%s: %s\n", name, value, err);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s BOOTSTRAP TOPIC [key=value ...]\n", argv[0]);
        return 2;
    }
    const char *topic = argv[2];
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (set(conf, "bootstrap.servers", argv[1]) || set(conf, "group.id", "fast-consumer") ||
        set(conf, "enable.partition.eof", "true") || set(conf, "enable.auto.commit", "false") ||
        set(conf, "enable.auto.offset.store", "false") || set(conf, "auto.offset.reset", "earliest"))
        return 2;
    for (int i = 3; i < argc; i++) {
        char *eq = strchr(argv[i], '=');
        if (eq == NULL) {
            fprintf(stderr, "fast_consumer: %s: expected key=value\n", argv[i]);
            return 2;
        }
        *eq = '\0';
        if (set(conf, argv[i], eq + 1))
            return 2;
    }
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
    if (rk == NULL) {
        fprintf(stderr, "fast_consumer: %s\n", err);
        return 2;
    }
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 0, rkt, &md, 10000);
    if (e || md->topic_cnt != 1 || md->topics[0].err || md->topics[0].partition_cnt == 0) {
        fprintf(stderr, "fast_consumer: no metadata for %s: %s\n", topic,
                rd_kafka_err2str(e ? e : (md->topic_cnt == 1 ? md->topics[0].err : RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC)));
        return 1;
    }
    int partitions = md->topics[0].partition_cnt;
    rd_kafka_topic_partition_list_t *assignment = rd_kafka_topic_partition_list_new(partitions);
    for (int i = 0; i < partitions; i++)
        rd_kafka_topic_partition_list_add(assignment, topic, md->topics[0].partitions[i].id)->offset =
            RD_KAFKA_OFFSET_BEGINNING;
    rd_kafka_metadata_destroy(md);
    rd_kafka_topic_destroy(rkt);
    rd_kafka_poll_set_consumer(rk);
    if ((e = rd_kafka_assign(rk, assignment)) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        fprintf(stderr, "fast_consumer: assign: %s\n", rd_kafka_err2str(e));
        return 1;
    }
    rd_kafka_topic_partition_list_destroy(assignment);
    rd_kafka_queue_t *queue = rd_kafka_queue_get_consumer(rk);

    rd_kafka_message_t *batch[BATCH];
    long long messages = 0, bytes = 0, errors = 0;
    double first = 0.0, last = 0.0;
    int at_end = 0;
    double give_up = now_s() + 300.0;
    while (at_end < partitions && now_s() < give_up) {
        ssize_t n = rd_kafka_consume_batch_queue(queue, 1000, batch, BATCH);
        if (n < 0) {
            fprintf(stderr, "fast_consumer: %s\n", rd_kafka_err2str(rd_kafka_last_error()));
            return 1;
        }
        /* The rate runs from the first batch's arrival: its own bytes are not in it. */
        int first_batch = messages == 0;
        for (ssize_t i = 0; i < n; i++) {
            rd_kafka_message_t *m = batch[i];
            if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
                if (messages == 0)
                    first = now_s();
                messages++;
                if (!first_batch)
                    bytes += (long long)m->len;
            } else if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
                at_end++;
                last = now_s();
            } else {
                errors++;
                fprintf(stderr, "fast_consumer: [%d] %s\n", (int)m->partition, rd_kafka_message_errstr(m));
            }
            rd_kafka_message_destroy(m);
        }
    }
    printf("{\"messages\": %lld, \"value_bytes\": %lld, \"first_s\": %.6f, \"last_s\": %.6f, \"errors\": %lld, "
           "\"partitions\": %d, \"complete\": %s}\n",
           messages, bytes, first, last, errors, partitions, at_end >= partitions ? "true" : "false");
    fflush(stdout);
    rd_kafka_queue_destroy(queue);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return at_end >= partitions ? 0 : 1;
}
