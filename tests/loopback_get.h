/*
 * loopback_get.h — one HTTP/1.1 GET to a server on 127.0.0.1 in the
 * runtime's tests (test_runtime_devices.c, test_runtime_oom.c,
 * test_runtime_trace.c): the whole answer, head and body, into buf.
 */
#ifndef AA_TEST_LOOPBACK_GET_H
#define AA_TEST_LOOPBACK_GET_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "adaptalloc/runtime.h"

/* GET path from 127.0.0.1:port with Connection: close; at most cap - 1
 * bytes of the answer into buf, NUL-terminated. */
static inline void loopback_get(int port, const char *path, char *buf, size_t cap) {
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  char req[256];
  int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                   path);
  assert_int_equal(write(fd, req, (size_t)n), n);
  size_t len = 0;
  ssize_t k;
  while (len + 1 < cap && (k = read(fd, buf + len, cap - 1 - len)) > 0)
    len += (size_t)k;
  buf[len] = '\0';
  close(fd);
}

/* The port of the default runtime's server (aa_runtime_http_address). */
static inline int runtime_http_port(void) {
  char addr[64];
  assert_int_equal(aa_runtime_http_address(addr, sizeof addr), AA_OK);
  char *colon = strrchr(addr, ':');
  assert_non_null(colon);
  return atoi(colon + 1);
}

#endif
