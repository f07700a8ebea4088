/* What a 150-byte write costs the kernel through writev(2) and through
 * send(2), on a loopback TCP connection: the reason src/conn/tls_stream.rs
 * puts a single TLS record on the socket with send (RecordSink).
 *
 * Each call is timed with the process CPU clock (the clock's own cost is
 * in both columns alike, so the difference is what counts); the receiver
 * drains every 100 writes so the socket never fills. Three rounds, each
 * mode 200,000 calls.
 *
 *   cc -O2 -o /tmp/send_vs_writev benches/profiles/send_vs_writev.c && /tmp/send_vs_writev
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static double cpu_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(void) {
    struct sockaddr_in address = {0};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    int listener = socket(AF_INET, SOCK_STREAM, 0);
    if (bind(listener, (void *)&address, sizeof address) || listen(listener, 1)
        || getsockname(listener, (void *)&address, &length)) {
        perror("listen");
        return 1;
    }
    int client = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(client, (void *)&address, sizeof address)) {
        perror("connect");
        return 1;
    }
    int server = accept(listener, NULL, NULL);
    char record[150], sink[1 << 16];
    memset(record, 'x', sizeof record);
    const int calls = 200000;
    for (int round = 0; round < 3; round++) {
        for (int mode = 0; mode < 2; mode++) {
            double spent = 0;
            for (int i = 0; i < calls; i++) {
                double start = cpu_seconds();
                if (mode == 0) {
                    struct iovec one = {record, sizeof record};
                    writev(server, &one, 1);
                } else {
                    send(server, record, sizeof record, MSG_NOSIGNAL);
                }
                spent += cpu_seconds() - start;
                if (i % 100 == 99) {
                    while (recv(client, sink, sizeof sink, MSG_DONTWAIT) > 0) {
                    }
                }
            }
            printf("%s %.0f ns a call\n", mode ? "send  " : "writev", spent / calls * 1e9);
        }
    }
    return 0;
}
