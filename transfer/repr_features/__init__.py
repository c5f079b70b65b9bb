"""Representation features (LoopFM, DESIGN §5): quantised teacher codes stored per example and
joined as-of to each student example (the user's codes strictly before its time).

The compressor that makes the codes and the attention pool that reads them are models, so they
live in ``adapters`` (``gemkd.adapters.compressor``, ``gemkd.adapters.code_attention``); this
package holds what needs no model: quantisation, the code store, the as-of join and mean pooling.
"""

from gemkd.transfer.repr_features.asof import AsOfCodes, has_history, pool_mean
from gemkd.transfer.repr_features.codes import (
    BITS,
    CODES_FILE,
    CODES_JSON,
    CodeStore,
    code_nbytes,
    code_schema,
    dequantize_codes,
    quantize_codes,
    write_code_store,
)

__all__ = [
    "BITS",
    "CODES_FILE",
    "CODES_JSON",
    "AsOfCodes",
    "CodeStore",
    "code_nbytes",
    "code_schema",
    "dequantize_codes",
    "has_history",
    "pool_mean",
    "quantize_codes",
    "write_code_store",
]
