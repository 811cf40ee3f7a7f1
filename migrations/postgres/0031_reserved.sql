-- Reserved for a migration written on another branch (dropped when the branches merge).
SELECT 1;
