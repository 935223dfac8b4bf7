"""Backup and restore: every node and relationship dumped with its properties, and created again in an
empty graph. Labels and types are spliced in with ``str.format`` from :data:`LABELS` / :data:`REL_TYPES`
only (:mod:`factloom.graph.queries.schema`).
"""

from __future__ import annotations

__all__ = ["DUMP_NODES", "DUMP_RELATIONSHIPS", "RESTORE_NODES", "RESTORE_RELATIONSHIPS", "COUNT_ALL", "WIPE_ALL"]

# every node of a label (from LABELS), every relationship of a type (from REL_TYPES), with its
# properties; restore creates them again in an empty graph, mapping the old element ids to the new
DUMP_NODES = "MATCH (n:{label}) RETURN elementId(n) AS id, properties(n) AS p"
DUMP_RELATIONSHIPS = "MATCH (a)-[r:{type}]->(b) RETURN elementId(a) AS a, elementId(b) AS b, properties(r) AS p"
RESTORE_NODES = """
UNWIND $rows AS row
CREATE (n:{label})
SET n = row.p
RETURN row.id AS old, elementId(n) AS new
"""
RESTORE_RELATIONSHIPS = """
UNWIND $rows AS row
MATCH (a) WHERE elementId(a) = row.a
MATCH (b) WHERE elementId(b) = row.b
CREATE (a)-[r:{type}]->(b)
SET r = row.p
RETURN count(r) AS n
"""
COUNT_ALL = "MATCH (n) RETURN count(n) AS n"
# what a failed restore wrote into the graph it found empty
WIPE_ALL = "MATCH (n) CALL (n) { DETACH DELETE n } IN TRANSACTIONS OF 5000 ROWS"
