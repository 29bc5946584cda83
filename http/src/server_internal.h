/*
 * server_internal.h — what server.c (the daemon's life cycle, the listening
 * socket) and request.c (libmicrohttpd's request callbacks) share: the
 * server handle and the callbacks server.c gives libmicrohttpd. http/ only.
 */
#ifndef AA_HTTP_SERVER_INTERNAL_H
#define AA_HTTP_SERVER_INTERNAL_H

#include <microhttpd.h>

#include "http_internal.h"
#include "intake.h"

#if MHD_VERSION < 0x00097002
typedef int aa__mhd_result;
#else
typedef enum MHD_Result aa__mhd_result;
#endif

struct aa_http {
  aa__http_state st;
  aa__intake *intake; /* the front door: owns the listening socket */
  struct MHD_Daemon *daemon;
  int port;
  char bound[64];
};

/* request.c: libmicrohttpd's callbacks; cls is the aa_http. A request is
 * collected into an aa__http_req (its parsed head checked again, its body
 * bounded by max_body), answered by the router, and its answer sent. */
aa__mhd_result aa__http_on_request(void *cls, struct MHD_Connection *c,
                                   const char *url, const char *method,
                                   const char *version, const char *upload_data,
                                   size_t *upload_data_size, void **req_cls);
void aa__http_on_completed(void *cls, struct MHD_Connection *c, void **req_cls,
                           enum MHD_RequestTerminationCode toe);
void aa__http_on_connection(void *cls, struct MHD_Connection *c,
                            void **socket_context,
                            enum MHD_ConnectionNotificationCode code);
/* Percent-decoding of the path and the query in place ("%00" is kept). */
size_t aa__http_unescape(void *cls, struct MHD_Connection *c, char *s);

#endif /* AA_HTTP_SERVER_INTERNAL_H */
