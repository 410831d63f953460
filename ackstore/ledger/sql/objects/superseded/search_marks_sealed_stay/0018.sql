-- search_marks_sealed_stay as migration 0018 defined it (superseded by migration 0019: UPDATE stays refused row by row; a sealed row is deleted only once archived: DELETE is checked per statement (archiving)).
CREATE OR REPLACE TRIGGER search_marks_sealed_stay BEFORE UPDATE OR DELETE ON search_marks
FOR EACH ROW EXECUTE FUNCTION ackstore_refuse_sealed_change();
