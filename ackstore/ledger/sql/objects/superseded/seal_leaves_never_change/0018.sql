-- seal_leaves_never_change as migration 0018 defined it (superseded by migration 0019: a seal's leaves are deleted once archived (seal_leaves_deleted_once_archived)).
CREATE OR REPLACE TRIGGER seal_leaves_never_change BEFORE UPDATE OR DELETE ON seal_leaves
FOR EACH ROW EXECUTE FUNCTION ackstore_refuse_change();
