-- Schema version 3: a change takes its transaction's id before its revision.
--
-- A broker reads changes by revision. A revision below one it has read but
-- not read itself is either still committing, or will never be read (its
-- row changed again, or it rolled back). A transaction that writes takes
-- its id at its first row; the revision comes from the trigger before the
-- row is written, so without this an insert could hold a revision before
-- it holds an id. With it, every transaction holding a revision has an id
-- below the `xmax` of any snapshot taken after the revision was drawn, and
-- a reader that sees every such transaction ended (`xmin`) knows a revision
-- it did not find is not coming (link.rs, `Cursor`).
CREATE OR REPLACE FUNCTION toolgate_next_revision() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM txid_current();
    NEW.revision := nextval('toolgate_revision');
    RETURN NEW;
END
$$;
