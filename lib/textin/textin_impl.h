/* Private to lib/textin. */
#ifndef TITAN_TEXTIN_IMPL_H
#define TITAN_TEXTIN_IMPL_H

#include "textin/textin.h"

/* Make room for extra more bytes plus a NUL; -1 when out of memory. */
int textin_buf_reserve(textin_buf *b, size_t extra);

#endif
