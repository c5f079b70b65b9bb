"""Any time-stamped event log → the gemkd dataset schema, driven by a mapping file."""

from gemkd.transfer.data.importer.build import ImportResult, import_logs, log_columns
from gemkd.transfer.data.importer.mapping import Mapping
from gemkd.transfer.data.importer.mapping_parse import load_mapping, parse_mapping

__all__ = ["ImportResult", "Mapping", "import_logs", "load_mapping", "log_columns",
           "parse_mapping"]
