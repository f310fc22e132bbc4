/* fluxin.h: Flux's training inputs from image-caption samples, as torchtitan
 * 0.3.0 makes them (flux_datasets.py, then utils.py's preprocess_data), one
 * record (lib/fluxrec) per sample:
 *
 *   image    the bytes as datasets' Image feature opens them (lib/image),
 *            then _process_cc12m_image: an image with a side under
 *            image_size is skipped; the short side resized to image_size,
 *            the long one cropped at an offset (fluxin_crop_offset), RGB;
 *            kept as the (3, n, n) uint8 planes and/or encoded by the FLUX
 *            autoencoder into its posterior's moments (mean, logvar), the
 *            input of the sampling torchtitan does every step;
 *   caption  FluxTokenizer: T5's ids cut and padded to t5_len (256) and
 *            CLIP's to clip_len (77) (tok_encode_fixed), then FluxEmbedder:
 *            T5's last_hidden_state and CLIP's pooler_output (lib/textenc).
 *
 * What torchtitan does not do here, on purpose: prompt dropout (a training
 * step's draw: the records' header holds the empty string's encodings for
 * it) and the latents' sampling (a training step's draw too: the records hold
 * the moments).  torchtitan crops at torch.randint's offset; here the offset
 * is a function of (seed, the sample's index), or the centre
 * (fluxin_crop_offset), so a record's offset never depends on batching,
 * threads or which samples were skipped before it.
 *
 * titan-encode writes the records to a stream; titan-train can call
 * fluxin_encode on its own batches to encode on the fly as torchtitan does
 * (what the records hold is what its preprocess_data computes).
 *
 * A sample is skipped, never fatal, when its image is missing, cannot be
 * decoded (lib/image's refusals: truncated, corrupt, over the size limits,
 * formats PIL would open differently) or is smaller than image_size, when its
 * caption is missing or not UTF-8, or when its key does not fit a record.
 * The encoders run on the CPU backend (lib/textenc needs host memory). */
#ifndef TITAN_FLUXIN_H
#define TITAN_FLUXIN_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "core/err.h"
#include "fluxrec/fluxrec.h"
#include "image/image.h"

typedef struct fluxin_opts {
	const char *t5, *clip;         /* encoder folders (config.json, safetensors) */
	const char *t5_tokenizer;      /* tokenizer.json or its folder; NULL: t5's folder */
	const char *clip_tokenizer;    /* NULL: clip's folder */
	const char *autoencoder;       /* the FLUX ae.safetensors (lib/fluxae); NULL: no moments */
	const char *ae_config;         /* JSON with AutoEncoder.Config's names; NULL: FLUX.1's */
	int image_size;                /* 0: 256 (flux_debugmodel's img_size) */
	int t5_len;                    /* 0: 256 (max_t5_encoding_len) */
	int clip_len;                  /* 0: 77 */
	int crop_random;               /* else centred */
	uint64_t seed;
	uint32_t dtype;                /* FLUXREC_F32 / FLUXREC_BF16: the stored arrays */
	uint32_t model_dtype;          /* FLUXREC_F32 / FLUXREC_BF16: the encoders' numerics */
	int pixels;                    /* keep the RGB crop (always, without autoencoder) */
	const char *tok_cache;         /* compiled tokenizer cache folder, or NULL */
	/* torchtitan 0.3.0's tokenizer.test_mode: both encoders take t5_tokenizer's
	 * ids as its training streams hold them (BOS, the text, EOS), cut to the
	 * length and padded with 0; clip_tokenizer is not read. */
	int test_tokenizer;
	const image_limits *image_lim; /* NULL: image_default_limits */
} fluxin_opts;

/* Why a sample made no record. */
enum {
	FLUXIN_OK = 0,
	FLUXIN_NO_IMAGE,     /* no image field */
	FLUXIN_BAD_IMAGE,    /* refused by the decoder */
	FLUXIN_SMALL,        /* a side under image_size (torchtitan skips it too) */
	FLUXIN_NO_CAPTION,   /* no caption field */
	FLUXIN_BAD_CAPTION,  /* not UTF-8 (datasets' text decoding would raise) */
	FLUXIN_BAD_KEY,      /* too long for a record */
	FLUXIN_N_STATUS,
};
/* "too small", "undecodable image", ...: for summaries. */
const char *fluxin_status_name(int status);

typedef struct fluxin fluxin;

/* Load the tokenizers and encoders (weights hashed for the header's
 * identities), encode the empty string.  be must be a CPU backend and outlive
 * the fluxin.  NULL and err on failure. */
fluxin *fluxin_open(backend *be, const fluxin_opts *o, titan_err *err);
void fluxin_free(fluxin *f);
/* The autoencoder (its decoder samples images), NULL without one. */
struct flux_ae *fluxin_autoencoder(fluxin *f);
/* The draws torch makes building the autoencoder (flux_ae_conv_numel), 0
 * without one. */
int64_t fluxin_ae_init_draws(const fluxin *f);
/* The records' header: shapes, identities, the empty string's encodings. */
const fluxrec_header *fluxin_header(const fluxin *f);

typedef struct fluxin_sample {
	const char *key;
	uint64_t index;             /* its position in the input, skipped ones included */
	const uint8_t *image;       /* NULL: none */
	size_t image_bytes;
	const uint8_t *caption;     /* UTF-8, not NUL-terminated; NULL: none */
	size_t caption_bytes;
	/* The crop offset when the caller drew it (torchtitan's loader draws it
	 * with torch.randint: image_cc12m_draw); else fluxin_crop_offset's. */
	int has_offset;
	uint32_t offset;
} fluxin_sample;

/* Encode n samples, each through the encoders alone, so that a record has
 * the same bits in any batch (fluxin.c, run_text).  records: n *
 * record_bytes; status[i] FLUXIN_OK when record i is written and sealed, else
 * why sample i was skipped, with the reason in why[i] (naming its key).
 * Returns 0, or -1 with err on a failure that ends the job (memory, an
 * encoder's error). */
int fluxin_encode(fluxin *f, const fluxin_sample *s, int n, uint8_t *records, int *status,
		  titan_err *why, titan_err *err);

/* Captions alone through the encoders (the prompts of sampling): n
 * captions of bytes[i] bytes into t5 (n, t5_len, t5_dim) and clip (n,
 * clip_dim), host float32.  0, or -1 and err (a caption that is not UTF-8
 * names its index). */
int fluxin_encode_text(fluxin *f, const uint8_t *const *captions, const size_t *bytes, int n,
		       float *t5, float *clip, titan_err *err);

/* Seconds spent so far in each step of fluxin_encode (wall clock). */
typedef struct fluxin_times {
	double prepare;  /* decoding, cropping and tokenizing, on every thread */
	double t5, clip, ae;
} fluxin_times;
void fluxin_get_times(const fluxin *f, fluxin_times *t);

/* The crop offset of sample index among choices (>= 1) offsets: the centre,
 * (choices - 1) / 2, or with random the splitmix64 output for the state
 * seed + (index + 1) * 0x9E3779B97F4A7C15, modulo choices. */
uint32_t fluxin_crop_offset(int random, uint64_t seed, uint64_t index, uint32_t choices);

/* The image step alone: decode, skip or crop into rgb (3, n, n).  Returns a
 * status (FLUXIN_OK, FLUXIN_NO_IMAGE, FLUXIN_BAD_IMAGE, FLUXIN_SMALL; the
 * reason in err, naming key) and fills *w, *h (the decoded size) and *offset.
 * With *offset given (a non-NULL given_offset), that offset is the crop's; one
 * past the image's crop choices is a FLUXIN_BAD_IMAGE. */
int fluxin_image(const uint8_t *data, size_t size, const char *key, uint64_t index, int n,
		 int crop_random, uint64_t seed, const uint32_t *given_offset,
		 const image_limits *lim, uint8_t *rgb, uint32_t *w, uint32_t *h,
		 uint32_t *offset, titan_err *err);

#endif
