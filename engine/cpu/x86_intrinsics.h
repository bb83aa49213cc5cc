// <immintrin.h>, without the false -Wuninitialized reports GCC 12 makes
// inside its AVX-512 headers wherever _mm512_cvtepi32_ps, _mm512_cvtph_ps,
// _mm512_inserti64x4 and friends inline: their "undefined" vectors are
// initialised from themselves (GCC bug 105593, fixed in 13).
#pragma once

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
