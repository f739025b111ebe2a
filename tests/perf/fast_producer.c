/*
 * A producer that costs as little as librdkafka allows, for the data-plane benchmark (issue
 * 22): the Python producer loop of bench_dataplane.py spends about 5 µs of Python per message
 * (produce(), a delivery callback, Message.latency()), about half a core at the rates measured
 * there, on a machine whose two cores also run the brokers. This one does the same work with
 * librdkafka's C API: 1 KiB (MSG_BYTES) values round-robin over PARTITIONS partitions, no
 * keys, as fast as possible (RATE 0) or at RATE messages/s in 1 ms credits, and records each
 * delivery report's latency (rd_kafka_message_latency: produce() -> acknowledgement, the
 * figure confluent-kafka's Message.latency() gives).
 *
 *   gcc -O2 -o fast_producer fast_producer.c -lrdkafka   (headers: Debian's librdkafka-dev)
 *   fast_producer BOOTSTRAP TOPIC PARTITIONS SECONDS RATE WARMUP MSG_BYTES [key=value ...]
 *
 * The key=value pairs are librdkafka settings (acks, linger.ms, ...), but for two of this
 * program's own: `txn.messages=N` produces in transactions of N messages (transactional.id
 * must be set too; RATE must be 0): begin, N messages, commit, until SECONDS have passed, as
 * bench_producers.py's Python loop does; `stats.file=PATH` appends each of librdkafka's
 * statistics (statistics.interval.ms) to PATH, a JSON document per line. It produces WARMUP
 * messages and flushes them (not measured), prints "ready" and waits for a line on stdin,
 * then produces for SECONDS, flushes (at most 120 s) and prints one JSON line:
 *
 *   {"acked": N, "errors": E, "not_delivered": U, "seconds": S, "p50_ms": .., "p99_ms": ..,
 *    "max_ms": .., "cpu_s": C, "error_names": {"NAME": n, ...}}
 *
 * seconds: from the first measured produce() to the end of the flush; cpu_s: this process's
 * user + system CPU over the same window (getrusage). The payload is one buffer that
 * librdkafka does not copy (no RD_KAFKA_MSG_F_COPY): no per-message work beyond librdkafka's.
 */
#include <librdkafka/rdkafka.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define MAX_ERROR_KINDS 32

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           (double)ru.ru_stime.tv_usec / 1e6;
}

/* Delivery reports of the measured window: latencies in µs, errors by code. */
static int recording = 0;
static int64_t *latencies = NULL;
static size_t n_latencies = 0, cap_latencies = 0;
static long n_errors = 0;
static rd_kafka_resp_err_t error_codes[MAX_ERROR_KINDS];
static long error_counts[MAX_ERROR_KINDS];
static int n_error_kinds = 0;

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *msg, void *opaque) {
    (void)rk;
    (void)opaque;
    if (!recording)
        return;
    if (msg->err) {
        n_errors++;
        for (int i = 0; i < n_error_kinds; i++) {
            if (error_codes[i] == msg->err) {
                error_counts[i]++;
                return;
            }
        }
        if (n_error_kinds < MAX_ERROR_KINDS) {
            error_codes[n_error_kinds] = msg->err;
            error_counts[n_error_kinds++] = 1;
        }
        return;
    }
    if (n_latencies == cap_latencies) {
        cap_latencies = cap_latencies ? 2 * cap_latencies : 1 << 20;
        latencies = realloc(latencies, cap_latencies * sizeof *latencies);
        if (latencies == NULL) {
            fprintf(stderr, "fast_producer: out of memory\n");
            exit(1);
        }
    }
    latencies[n_latencies++] = rd_kafka_message_latency(msg);
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The same rank as bench_dataplane.percentile: round(q * (n - 1)). */
static double percentile_ms(double q) {
    if (n_latencies == 0)
        return -1.0;
    size_t i = (size_t)(q * (double)(n_latencies - 1) + 0.5);
    if (i >= n_latencies)
        i = n_latencies - 1;
    return (double)latencies[i] / 1000.0;
}

static FILE *stats_file = NULL;

static int on_stats(rd_kafka_t *rk, char *json, size_t json_len, void *opaque) {
    (void)rk;
    (void)opaque;
    if (stats_file != NULL) {
        fwrite(json, 1, json_len, stats_file);
        fputc('\n', stats_file);
        fflush(stats_file);
    }
    return 0; /* librdkafka frees json */
}

static void fail_on(rd_kafka_error_t *error, const char *what) {
    if (error != NULL) {
        fprintf(stderr, "fast_producer: %s: %s\n", what, rd_kafka_error_string(error));
        exit(1);
    }
}

static int set(rd_kafka_conf_t *conf, const char *name, const char *value) {
    char err[512];
    if (rd_kafka_conf_set(conf, name, value, err, sizeof err) != RD_KAFKA_CONF_OK) {
        fprintf(stderr, "fast_producer: %s=%s: %s\n", name, value, err);
        return -1;
    }
    return 0;
}

/* One message to partition i % partitions; 0 when librdkafka's queue is full. */
static int send_one(rd_kafka_topic_t *rkt, long i, int partitions, char *payload, size_t size) {
    if (rd_kafka_produce(rkt, (int32_t)(i % partitions), 0, payload, size, NULL, 0, NULL) == 0)
        return 1;
    rd_kafka_resp_err_t err = rd_kafka_last_error();
    if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
        fprintf(stderr, "fast_producer: produce: %s\n", rd_kafka_err2str(err));
        exit(1);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 8) {
        fprintf(stderr, "usage: %s BOOTSTRAP TOPIC PARTITIONS SECONDS RATE WARMUP MSG_BYTES [key=value ...]\n",
                argv[0]);
        return 2;
    }
    const char *topic = argv[2];
    int partitions = atoi(argv[3]);
    double seconds = atof(argv[4]);
    double rate = atof(argv[5]);
    long warmup = atol(argv[6]);
    size_t msg_bytes = (size_t)atol(argv[7]);
    if (partitions <= 0 || seconds <= 0 || rate < 0 || warmup < 0 || msg_bytes == 0) {
        fprintf(stderr, "fast_producer: bad arguments\n");
        return 2;
    }
    char err[512];
    long txn_messages = 0;
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (set(conf, "bootstrap.servers", argv[1]))
        return 2;
    for (int i = 8; i < argc; i++) {
        char *eq = strchr(argv[i], '=');
        if (eq == NULL) {
            fprintf(stderr, "fast_producer: %s: expected key=value\n", argv[i]);
            return 2;
        }
        *eq = '\0';
        if (strcmp(argv[i], "txn.messages") == 0) {
            txn_messages = atol(eq + 1);
        } else if (strcmp(argv[i], "stats.file") == 0) {
            stats_file = fopen(eq + 1, "a");
            if (stats_file == NULL) {
                perror(eq + 1);
                return 2;
            }
            rd_kafka_conf_set_stats_cb(conf, on_stats);
        } else if (set(conf, argv[i], eq + 1)) {
            return 2;
        }
    }
    if (txn_messages < 0 || (txn_messages > 0 && rate != 0)) {
        fprintf(stderr, "fast_producer: txn.messages needs RATE 0\n");
        return 2;
    }
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (rk == NULL) {
        fprintf(stderr, "fast_producer: %s\n", err);
        return 1;
    }
    if (txn_messages > 0)
        fail_on(rd_kafka_init_transactions(rk, 60000), "init_transactions");
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    char *payload = malloc(msg_bytes);
    FILE *urandom = fopen("/dev/urandom", "rb");
    if (payload == NULL || urandom == NULL || fread(payload, 1, msg_bytes, urandom) != msg_bytes) {
        fprintf(stderr, "fast_producer: no random payload\n");
        return 1;
    }
    fclose(urandom);

    /* Warm-up: connections, metadata, the first batches; not measured. */
    if (warmup > 0 && txn_messages > 0)
        fail_on(rd_kafka_begin_transaction(rk), "begin_transaction");
    for (long i = 0; i < warmup;) {
        if (send_one(rkt, i, partitions, payload, msg_bytes))
            i++;
        else
            rd_kafka_poll(rk, 1);
    }
    if (warmup > 0 && txn_messages > 0)
        fail_on(rd_kafka_commit_transaction(rk, 120000), "commit_transaction");
    rd_kafka_flush(rk, 60000);
    printf("ready\n");
    fflush(stdout);
    char line[64];
    if (fgets(line, sizeof line, stdin) == NULL)
        return 1;

    recording = 1;
    double cpu0 = cpu_s();
    double t0 = now_s(), end = t0 + seconds;
    long sent = 0;
    if (txn_messages > 0) {
        while (now_s() < end) {
            fail_on(rd_kafka_begin_transaction(rk), "begin_transaction");
            for (long k = 0; k < txn_messages;) {
                if (send_one(rkt, sent, partitions, payload, msg_bytes)) {
                    sent++;
                    k++;
                } else {
                    rd_kafka_poll(rk, 1);
                }
            }
            fail_on(rd_kafka_commit_transaction(rk, 120000), "commit_transaction");
        }
    } else if (rate == 0) {
        for (;;) {
            if (send_one(rkt, sent, partitions, payload, msg_bytes)) {
                sent++;
                if (sent % 1000)
                    continue;
                rd_kafka_poll(rk, 0);
            } else {
                rd_kafka_poll(rk, 1); /* the queue is full: wait for acknowledgements */
            }
            if (now_s() >= end)
                break;
        }
    } else {
        for (;;) {
            double now = now_s();
            if (now >= end)
                break;
            long due = (long)((now - t0) * rate); /* 1 ms credits: bursts of rate/1000 messages */
            while (sent < due && send_one(rkt, sent, partitions, payload, msg_bytes))
                sent++;
            rd_kafka_poll(rk, 1);
        }
    }
    rd_kafka_flush(rk, 120000);
    double t_last = now_s();
    double cpu = cpu_s() - cpu0;
    int not_delivered = rd_kafka_outq_len(rk);
    recording = 0;

    qsort(latencies, n_latencies, sizeof *latencies, cmp_i64);
    printf("{\"acked\": %zu, \"errors\": %ld, \"not_delivered\": %d, \"seconds\": %.6f, \"p50_ms\": %.3f, "
           "\"p99_ms\": %.3f, \"max_ms\": %.3f, \"cpu_s\": %.4f, \"error_names\": {",
           n_latencies, n_errors, not_delivered, t_last - t0, percentile_ms(0.5), percentile_ms(0.99),
           n_latencies ? (double)latencies[n_latencies - 1] / 1000.0 : -1.0, cpu);
    for (int i = 0; i < n_error_kinds; i++)
        printf("%s\"%s\": %ld", i ? ", " : "", rd_kafka_err2name(error_codes[i]), error_counts[i]);
    printf("}}\n");
    fflush(stdout);
    if (stats_file != NULL)
        rd_kafka_poll(rk, 1200); /* the statistics window that holds the end of the run */
    if (not_delivered)
        rd_kafka_purge(rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    rd_kafka_topic_destroy(rkt);
    rd_kafka_destroy(rk);
    free(payload);
    free(latencies);
    return 0;
}
