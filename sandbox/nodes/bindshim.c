/*
 * LD_PRELOAD shim for the sandbox GPU nodes: rewrite bind() to the wildcard IPv4 address
 * (0.0.0.0) into bind() to the node's own loopback address, PDLIFT_SANDBOX_BIND_ADDR.
 *
 * Why: the real fi_pingpong (libfabric util/pingpong.c) has no bind option; its server binds
 * its control socket to INADDR_ANY. On one machine that (a) breaks the loopback-only rule and
 * (b) makes two sandbox nodes collide on the same control port. With this shim each node's
 * fi_pingpong listens on its own 127.0.0.x address, as it would on its own host.
 * Binds to a specific address (the tcp provider's data endpoint on 127.0.0.1) are untouched.
 *
 * Also: fopen("/proc/kallsyms") fails with ENOENT. libfabric 1.17 (the Debian build here) reads
 * the whole kernel symbol table on every fi_getinfo, looking for ib_umem_dmabuf_get (a dma-buf
 * support probe for its verbs-based providers), 1 KiB per read: measured 10,500 reads and
 * 0.1 CPU-s of kernel time per fi_pingpong process, a third of a loopback's cost; a fabric stage
 * runs 64 loopbacks and its pairs on two shared cores. The probe only matters for registering
 * GPU memory, which the sandbox's tcp provider never does, and the table fi_pingpong prints is
 * unchanged.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);

int bind(int fd, const struct sockaddr *addr, socklen_t len)
{
    static bind_fn real_bind;
    if (!real_bind)
        real_bind = (bind_fn)dlsym(RTLD_NEXT, "bind");
    const char *node = getenv("PDLIFT_SANDBOX_BIND_ADDR");
    if (node && addr && addr->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)addr;
        if (in->sin_addr.s_addr == htonl(INADDR_ANY)) {
            struct sockaddr_in mine;
            memcpy(&mine, in, sizeof(mine));
            if (inet_pton(AF_INET, node, &mine.sin_addr) == 1)
                return real_bind(fd, (const struct sockaddr *)&mine, sizeof(mine));
        }
    }
    return real_bind(fd, addr, len);
}

typedef FILE *(*fopen_fn)(const char *, const char *);

FILE *fopen(const char *path, const char *mode)
{
    static fopen_fn real_fopen;
    if (!real_fopen)
        real_fopen = (fopen_fn)dlsym(RTLD_NEXT, "fopen");
    if (path && strcmp(path, "/proc/kallsyms") == 0) {
        errno = ENOENT;
        return NULL;
    }
    return real_fopen(path, mode);
}
