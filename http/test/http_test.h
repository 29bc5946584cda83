/*
 * http_test.h — the one header through which tests reach the HTTP
 * server's internals: what its files share (http/src/http_internal.h: the
 * server's state, the request and response, address parsing, the metrics
 * writer) and the routing checks (http/src/router.h). A test that includes
 * it gets http/test on its include path (tests/CMakeLists.txt), never
 * http/src. Not installed.
 */
#ifndef AA_HTTP_TEST_H
#define AA_HTTP_TEST_H

#include "../src/http_internal.h"
#include "../src/router.h"

#endif
