-- Reading the archive (ackstore/ledger/archive_reader.py): where the seals moved out are.

-- name: location_of
-- The root of the archive that holds seal :seal (none: the seal is hot).
SELECT a.location FROM (SELECT x.first_seal, x.location FROM archives x WHERE x.last_seal >= :seal
                        ORDER BY x.last_seal LIMIT 1) a
WHERE a.first_seal <= :seal
