module recipegohttp

go 1.26
