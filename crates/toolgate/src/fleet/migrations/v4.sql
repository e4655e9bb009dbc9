-- Schema version 4: what a joined session met.
--
-- A session started with `"join": true` under a parent and without a scope
-- of its own meets the scope of every sub-task its parent had started with
-- one. Those narrowings are kept with it (`[{"sessionID", "permissions"}]`,
-- as the state directory keeps them; NULL when it met none), so another
-- broker restores the same scope, even once those sub-tasks ended.
ALTER TABLE toolgate_sessions ADD COLUMN joined jsonb;
